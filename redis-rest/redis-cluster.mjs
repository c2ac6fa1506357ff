// Throwaway Redis topologies for the scale-out modes: a real Redis Cluster (Debian's redis-server in cluster
// mode, created with `redis-cli --cluster create`) and N independent redis-servers (several databases).
// Everything is ephemeral, as in startRedis: loopback only, nothing on disk but each node's cluster config
// file in its own temporary folder, children killed with this process.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { freePort } from "./processes.mjs";
import { startRedis } from "./redis-server.mjs";

const run = promisify(execFile);
const readyTimeoutMs = 20_000;

/**
 * @typedef {object} ClusterHandle
 * @property {import("./redis-server.mjs").RedisHandle[]} nodes every node, masters first (in slot order),
 *   then replicas; each can be killed, frozen or restarted like a startRedis handle
 * @property {string[]} urls every node's `redis://127.0.0.1:<port>`, the seed list for a cluster client
 * @property {(port: number) => Promise<"master" | "replica">} role what the node on `port` is now
 * @property {() => Promise<void>} waitUntilHealthy resolves once every live node reports `cluster_state:ok`
 *   and agrees on the masters
 * @property {() => Promise<void>} close stops every node and deletes their folders
 */

/**
 * Starts a Redis Cluster of `masters` masters (16384 slots split evenly by redis-cli) with `replicas` replicas
 * each, and waits until every node reports the cluster healthy.
 * @param {{ masters?: number, replicas?: number, nodeTimeoutMs?: number, bin?: string, cli?: string }} [options]
 *   nodeTimeoutMs: how long a master may be unreachable before its replica takes over (default 1000);
 *   bin/cli: the redis-server and redis-cli executables (default: on PATH)
 * @returns {Promise<ClusterHandle>}
 */
export async function startRedisCluster({
  masters = 3,
  replicas = 1,
  nodeTimeoutMs = 1000,
  bin = "redis-server",
  cli = "redis-cli",
} = {}) {
  if (masters < 3) throw new Error("startRedisCluster: Redis Cluster needs at least 3 masters");
  const count = masters * (1 + replicas);
  /** @type {import("./redis-server.mjs").RedisHandle[]} */
  const nodes = [];
  const close = () => Promise.all(nodes.map((node) => node.close())).then(() => undefined);
  try {
    // The cluster bus port is chosen free too (the default, port + 10000, may be taken or out of range),
    // and chosen again with the node's port when either was taken between probing and binding.
    const started = await startRedisServers(count, {
      bin,
      args: () => async () => [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        String(await freePort()),
        "--cluster-node-timeout",
        String(nodeTimeoutMs),
        // A replica may take over at once after the timeout, however stale it thinks it is.
        "--cluster-replica-validity-factor",
        "0",
      ],
    });
    nodes.push(...started);
    // redis-cli makes the first `masters` addresses the masters and assigns the rest as their replicas.
    await run(
      cli,
      [
        "--cluster",
        "create",
        ...nodes.map((node) => `127.0.0.1:${node.port}`),
        "--cluster-replicas",
        String(replicas),
        "--cluster-yes",
      ],
      { timeout: readyTimeoutMs },
    );
    const handle = {
      nodes,
      urls: nodes.map((node) => node.url),
      role: (/** @type {number} */ port) => roleOf(port),
      waitUntilHealthy: () => waitUntilHealthy(nodes, masters * replicas),
      close,
    };
    await handle.waitUntilHealthy();
    return handle;
  } catch (error) {
    await close();
    const message = error instanceof Error ? error.message : String(error);
    throw new Error(`the Redis Cluster did not start: ${message}`);
  }
}

/**
 * Starts `count` independent redis-servers (the several-databases mode: one per endpoint).
 * @param {number} count
 * @param {{ bin?: string, args?: (index: number) => string[] | (() => Promise<string[]>) }} [options] args:
 *   extra redis-server arguments of the index-th server (as startRedis takes them)
 * @returns {Promise<import("./redis-server.mjs").RedisHandle[]>}
 */
export async function startRedisServers(count, { bin, args = () => [] } = {}) {
  const settled = await Promise.allSettled(
    Array.from({ length: count }, (_, i) => startRedis({ bin, args: args(i) })),
  );
  const failed = settled.find((s) => s.status === "rejected");
  const started = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  if (failed) {
    await Promise.all(started.map((node) => node.close()));
    throw failed.reason;
  }
  return started;
}

/**
 * Polls every reachable node until each says `cluster_state:ok`, knows all the others, and every replica
 * has finished its first sync (so a failover right after start has data to promote).
 * @param {import("./redis-server.mjs").RedisHandle[]} nodes
 * @param {number} replicaCount
 */
async function waitUntilHealthy(nodes, replicaCount) {
  const deadline = Date.now() + readyTimeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    const states = await Promise.all(nodes.map((node) => nodeState(node.port)));
    const live = states.filter((s) => s !== null);
    const syncing = live.filter((s) => s.role === "replica" && !s.synced).length;
    const replicasUp = live.filter((s) => s.role === "replica").length;
    if (
      live.every((s) => s.ok && s.known >= live.length) &&
      syncing === 0 &&
      replicasUp >= Math.min(replicaCount, live.length)
    )
      return;
    last = JSON.stringify(states);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`the cluster did not become healthy within ${readyTimeoutMs} ms: ${last}`);
}

/**
 * One node's view, or null when it does not answer.
 * @param {number} port
 * @returns {Promise<{ ok: boolean, known: number, role: "master" | "replica", synced: boolean } | null>}
 */
async function nodeState(port) {
  const redis = new Redis(port, "127.0.0.1", {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    // A node too busy to answer counts as not answering this round: the poll goes on, bounded by its deadline.
    connectTimeout: 1000,
    commandTimeout: 1000,
  });
  redis.on("error", () => {});
  try {
    await redis.connect();
    const [info, replication] = await Promise.all([redis.cluster("INFO"), redis.info("replication")]);
    const field = (/** @type {string} */ text, /** @type {string} */ name) =>
      new RegExp(`^${name}:(\\S*)`, "m").exec(text)?.[1];
    const role = field(replication, "role") === "slave" ? "replica" : "master";
    return {
      ok: field(String(info), "cluster_state") === "ok",
      known: Number(field(String(info), "cluster_known_nodes")),
      role,
      synced: role === "master" || field(replication, "master_link_status") === "up",
    };
  } catch {
    return null;
  } finally {
    redis.disconnect();
  }
}

/**
 * @param {number} port
 * @returns {Promise<"master" | "replica">}
 */
async function roleOf(port) {
  const state = await nodeState(port);
  if (!state) throw new Error(`redis node 127.0.0.1:${port} does not answer`);
  return state.role;
}
