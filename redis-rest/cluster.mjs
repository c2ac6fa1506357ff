// The REST server in front of a Redis Cluster, answering as one Upstash database would: commands are routed
// by their keys' hash slot (ioredis's Cluster follows MOVED/ASK), a command whose keys span slots gets
// Redis's own CROSSSLOT error verbatim, and the keyless commands that concern the whole database (scripts,
// SCAN, KEYS, DBSIZE, FLUSHALL) reach every master.
import { Cluster, Command } from "ioredis";
import { BadCommand, createExecutor, runAll } from "./commands.mjs";

/** Redis's own text for keys in different slots; passed through as is, as Upstash does. */
export const CROSSSLOT = "CROSSSLOT Keys in request don't hash to the same slot";

/**
 * Connects a cluster client to the seed nodes (any reachable one is enough).
 * @param {string[]} seeds `redis://host:port` URLs
 * @param {import("ioredis").RedisOptions} redisOptions the per-node options of the single-Redis path
 */
export function connectCluster(seeds, redisOptions) {
  const cluster = new Cluster(
    seeds.map((seed) => {
      const url = new URL(seed);
      return { host: url.hostname, port: Number(url.port || 6379) };
    }),
    {
      // Each node connects as soon as the cluster learns of it: with the offline queue off, a command sent
      // to a node still connecting would fail ("Connection is closed") although the cluster is healthy.
      redisOptions: { ...redisOptions, lazyConnect: false },
      lazyConnect: true,
      enableOfflineQueue: false,
      // A command on a connection that closed may have run: never resend it (a limiter decision is not
      // idempotent). CLUSTERDOWN goes back to the client too, as a Redis that cannot answer.
      retryDelayOnFailover: 0,
      retryDelayOnClusterDown: 0,
      // After a failover the dead master's slots are found again within a second even without a MOVED.
      slotsRefreshInterval: 1000,
      clusterRetryStrategy: (attempt) => Math.min(attempt * 50, 500),
    },
  );
  cluster.on("error", () => {}); // surfaces per request as 503; reconnecting is automatic
  return cluster;
}

/**
 * Whole-database commands: run on every master, replies combined into one.
 * @type {Record<string, (replies: unknown[]) => unknown>}
 */
const EVERY_MASTER = {
  "script load": (replies) => replies[0],
  "script flush": (replies) => replies[0],
  flushall: (replies) => replies[0],
  flushdb: (replies) => replies[0],
  // A script exists only if every master has it: EVALSHA may land on any of them.
  "script exists": (replies) =>
    /** @type {unknown[][]} */ (replies)[0]?.map((_, i) =>
      replies.every((r) => Number(/** @type {unknown[]} */ (r)[i]) === 1) ? "1" : "0",
    ),
  dbsize: (replies) => String(replies.reduce((sum, r) => sum + Number(r), 0)),
  keys: (replies) => replies.flat(),
};

/**
 * Binds the executor of commands.mjs to a cluster: same interface, cluster routing.
 * @param {Cluster} cluster
 * @param {import("./scripts.mjs").ScriptTranslator} scripts
 */
export function createClusterExecutor(cluster, scripts) {
  const routed = createExecutor(/** @type {any} */ (cluster), scripts);
  const masters = () =>
    cluster
      .nodes("master")
      .sort((a, b) =>
        `${a.options.host}:${a.options.port}`.localeCompare(`${b.options.host}:${b.options.port}`),
      );

  /**
   * @param {Array<string | Buffer>} args
   * @returns {Promise<import("./commands.mjs").Outcome>}
   */
  async function run(args) {
    const name = String(args[0]).toLowerCase();
    const sub = `${name} ${String(args[1] ?? "").toLowerCase()}`;
    const combine = EVERY_MASTER[sub] ?? EVERY_MASTER[name];
    if (combine) {
      const outcomes = await Promise.all(masters().map((node) => createExecutor(node, scripts).run(args)));
      const failed = outcomes.find((o) => "error" in o);
      if (failed) return failed;
      return { result: combine(outcomes.map((o) => /** @type {{ result: unknown }} */ (o).result)) };
    }
    if (name === "scan") return scan(args);
    // A command whose keys span slots: what Redis answers (ioredis would send it to the first key's node,
    // which says the same, but only when that node also owns the slot of the others' it checks).
    if (slotsOf(args).size > 1) return { error: CROSSSLOT };
    return routed.run(args);
  }

  /**
   * SCAN over every master in turn. The cursor carries the master's index and that master's own cursor
   * (`own * masters + index`), so it stays one opaque number; 0 starts and ends the whole iteration.
   * @param {Array<string | Buffer>} args
   */
  async function scan(args) {
    const nodes = masters();
    let cursor;
    try {
      cursor = BigInt(String(args[1] ?? ""));
    } catch {
      return { error: "ERR invalid cursor" };
    }
    const count = BigInt(nodes.length);
    const index = Number(cursor % count);
    const node = nodes[index];
    if (!node) return { error: "ERR invalid cursor" };
    const outcome = await createExecutor(node, scripts).run([
      "SCAN",
      String(cursor / count),
      ...args.slice(2),
    ]);
    if ("error" in outcome) return outcome;
    const [next, keys] = /** @type {[Buffer, unknown[]]} */ (outcome.result);
    const own = BigInt(String(next));
    const following =
      own !== 0n ? own * count + BigInt(index) : index + 1 < nodes.length ? BigInt(index + 1) : 0n;
    return { result: [Buffer.from(String(following)), keys] };
  }

  return {
    run,
    /** @param {Array<Array<string | Buffer> | BadCommand>} commands */
    pipeline: (commands) => runAll(commands, run),
    /**
     * A transaction runs on one node: all its keys must share a slot, or the whole transaction is refused
     * with CROSSSLOT, as Redis Cluster refuses it.
     * @param {Array<Array<string | Buffer>>} commands
     */
    transaction(commands) {
      const slots = new Set(commands.flatMap((c) => [...slotsOf(c)]));
      if (slots.size > 1) throw new BadCommand(CROSSSLOT);
      return routed.transaction(commands);
    },
  };
}

/**
 * The hash slots of a command's keys, found the way ioredis finds them to route it.
 * @param {Array<string | Buffer>} args
 * @returns {Set<number>}
 */
function slotsOf(args) {
  let keys;
  try {
    keys = new Command(String(args[0]).toLowerCase(), args.slice(1)).getKeys();
  } catch {
    return new Set(); // a malformed command: Redis answers it with its own error
  }
  return new Set(
    keys
      .filter((key) => key !== undefined)
      .map((key) => /** @type {number} */ (new Command("get", [key]).getSlot())),
  );
}
