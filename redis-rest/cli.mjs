#!/usr/bin/env node
// `npm run redis-rest -- --port <p> --token <t> [--redis redis://host:port] [--cluster] [--rtt <ms>]`
// Runs the local Upstash-compatible REST server alone, in front of the given Redis or of a redis-server it
// starts itself (ephemeral, nothing on disk). With --cluster: in front of a Redis Cluster, the one whose seed
// nodes --redis lists (comma-separated), or a 3-master cluster (one replica each) it starts itself.
// With --rtt <ms>: every request pays that round trip (half each way), as to a database in another region.
// Prints `listening on http://127.0.0.1:<p>` once ready. SIGINT, SIGTERM, SIGHUP or its parent going away stop it
// and everything it started; a failure to start exits 1 with a message.
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { ensureRedis } from "../scripts/debian-package.mjs";
import { startRedisCluster } from "./redis-cluster.mjs";
import { startRedis } from "./redis-server.mjs";
import { startRestServer } from "./server.mjs";

const usage =
  "usage: npm run redis-rest -- [--port <p>] [--token <t>] [--redis redis://host:port[,redis://…]] [--cluster] [--rtt <ms>]";
/** @type {{ port?: string, token?: string, redis?: string, cluster?: boolean, rtt?: string, help?: boolean }} */
let options;
try {
  ({ values: options } = parseArgs({
    options: {
      port: { type: "string" },
      token: { type: "string" },
      redis: { type: "string" },
      cluster: { type: "boolean" },
      rtt: { type: "string" },
      help: { type: "boolean" },
    },
  }));
} catch (error) {
  console.error(`${error instanceof Error ? error.message : error}\n${usage}`);
  process.exit(2);
}
if (options.help) {
  console.log(usage);
  process.exit(0);
}
const port = options.port === undefined ? 0 : Number(options.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`--port must be a port number, got ${options.port}\n${usage}`);
  process.exit(2);
}
const rttMs = options.rtt === undefined ? 0 : Number(options.rtt);
if (options.rtt?.trim() === "" || !Number.isFinite(rttMs) || rttMs < 0 || rttMs > 60_000) {
  console.error(`--rtt must be a round trip in ms (0 to 60000), got ${options.rtt}\n${usage}`);
  process.exit(2);
}

const token = options.token ?? randomBytes(24).toString("base64url");
const cluster = options.cluster ?? false;
/** @type {{ urls: string[], close: () => Promise<void> } | undefined} */
let redis;
/** @type {import("./server.mjs").RestServer | undefined} */
let server;

// Handlers first: a signal during startup stops what has started (the redis-server children die with this
// process, their folders go at its exit). SIGHUP too: a closed terminal must not leave anything behind.
let stopping = false;
/** @param {number} code */
async function stop(code) {
  if (stopping) return;
  stopping = true;
  try {
    await server?.close();
    await redis?.close();
  } finally {
    process.exit(code);
  }
}
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, () => stop(0));
// Re-parented means whoever started it (npm, a shell) is gone: stop rather than linger.
const parentPid = process.ppid;
setInterval(() => {
  if (process.ppid !== parentPid) stop(0);
}, 500).unref();

/**
 * One startup step: a failure is reported and stops everything (exit 1); once a stop has begun (a signal
 * during the step), startup goes no further and the stop ends the process.
 * @template T
 * @param {string} what
 * @param {() => Promise<T>} run
 * @returns {Promise<T>}
 */
async function step(what, run) {
  try {
    const value = await run();
    if (!stopping) return value;
  } catch (error) {
    console.error(`cannot start ${what}: ${error instanceof Error ? error.message : error}`);
    await stop(1);
  }
  return new Promise(() => {}); // stop() ends the process
}

if (!options.redis) {
  redis = await step("Redis", async () => {
    // On a fresh machine, Debian's redis-server (and redis-cli, which creates the cluster) on first use.
    ensureRedis();
    if (cluster) return startRedisCluster();
    const single = await startRedis();
    return { ...single, urls: [single.url] };
  });
  console.error(`${cluster ? "Redis Cluster" : "redis-server"} (ephemeral) at ${redis.urls.join(", ")}`);
}
const redisUrl = options.redis ?? /** @type {{ urls: string[] }} */ (redis).urls.join(",");
server = await step("the REST server", () => startRestServer({ redisUrl, cluster, token, port, rttMs }));
if (!options.token) console.error(`token: ${token}`);
if (rttMs > 0) console.error(`adding a ${rttMs} ms round trip to every request`);
console.log(`listening on ${server.url}`);
