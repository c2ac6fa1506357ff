#!/usr/bin/env node
/**
 * What a rule's `block` (docs/protect.md, "Penalty box") costs per decision, counted as Upstash bills it:
 * EVALSHA plus every command the script runs (INFO commandstats), on an ephemeral redis-server.
 *   node bench/redis/block-commands.mjs [--baseline main]
 * Per algorithm, one rule, warm state (each identity's second decision): without a block on this checkout and
 * on `--baseline` (the same KEYS/ARGV: a rule without a block must cost exactly what it cost before), with a
 * block and allowed, the denial that starts a block, and a denial while it stands.
 */
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { Redis } from "ioredis";
import { startRedis, stripKeyLocking } from "../../redis-rest/index.mjs";
import { extractBaseline } from "../lib/baseline.mjs";
import { floodgateScripts } from "../lib/scripts.mjs";
import { table } from "../lib/report.mjs";

const IDENTITIES = 1000;
const ALGORITHMS = [
  ["fixed-window", "1"],
  ["sliding-window", "2"],
  ["sliding-log", "3"],
  ["token-bucket", "4"],
  ["gcra", "5"],
];
const BLOCK_MS = "900000";

/** `decide` of another revision's sources, assembled as this checkout's are (bench/lib/scripts.mjs). */
async function decideOf(dir) {
  const out = await build({
    entryPoints: [`${dir}/src/engine/scripts.ts`],
    bundle: true,
    write: false,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    loader: { ".lua": "text" },
    logLevel: "silent",
  });
  const module = await import(
    `data:text/javascript;base64,${Buffer.from(out.outputFiles[0]?.text ?? "").toString("base64")}`
  );
  return stripKeyLocking(module.SCRIPTS.find((s) => s.name === "decide").source);
}

/**
 * One plain decision as the Worker sends it (src/engine/script.ts): a limit of `limit` a day, cost 1, no
 * override key; with `block`, the mode slot `1:<ms>` and the block key after the state key.
 */
function call(sha, code, id, { limit, block }) {
  const key = `rl:a${code}:{${id}}`;
  const keys = block ? [key, `${key}:block`] : [key];
  const needsId = code === "3";
  const args = [needsId ? `req-${id}-${Math.random()}` : ""];
  const burst = limit;
  args.push(code, block ? `1:${BLOCK_MS}` : "1", String(limit), "86400000", String(burst), "1", "0");
  return ["EVALSHA", sha, String(keys.length), ...keys, ...args];
}

/** Billable commands per decision of one call per identity (INFO commandstats, CONFIG/INFO excluded). */
async function commandsPer(redis, build, ids) {
  await redis.config("RESETSTAT");
  const pipeline = redis.pipeline();
  for (const id of ids) pipeline.call(...build(id));
  const replies = await pipeline.exec();
  const error = replies?.find(([e]) => e);
  if (error) throw new Error(String(error[0]));
  const stats = await redis.info("commandstats");
  let calls = 0;
  for (const [, command, n] of stats.matchAll(/cmdstat_([a-z|]+):calls=(\d+)/g)) {
    if (command !== "config" && command !== "info") calls += Number(n);
  }
  return calls / ids.length;
}

const { values } = parseArgs({ options: { baseline: { type: "string", default: "main" } } });
const server = await startRedis();
const redis = new Redis(server.url);
try {
  const ours = await redis.script("LOAD", (await floodgateScripts()).decide);
  const before = await redis.script("LOAD", await decideOf(extractBaseline(values.baseline)));
  const rows = [];
  for (const [algorithm, code] of ALGORITHMS) {
    const ids = (tag) => Array.from({ length: IDENTITIES }, (_, i) => `${tag}-${code}-${i}`);
    // Warm: each identity's first decision creates its state, the second is measured.
    const warm = async (sha, tag, options) => {
      const who = ids(tag);
      await commandsPer(redis, (id) => call(sha, code, id, options), who);
      return commandsPer(redis, (id) => call(sha, code, id, options), who);
    };
    const plain = await warm(ours, "plain", { limit: 1000 });
    const baseline = await warm(before, "base", { limit: 1000 });
    const allowed = await warm(ours, "allowed", { limit: 1000, block: true });
    // Limit 1: the first decision is allowed, the second denied and starts the block, the third meets it.
    const tripping = ids("trip");
    const byLimit1 = (id) => call(ours, code, id, { limit: 1, block: true });
    await commandsPer(redis, byLimit1, tripping);
    const starts = await commandsPer(redis, byLimit1, tripping);
    const stands = await commandsPer(redis, byLimit1, tripping);
    rows.push(
      [algorithm, plain, baseline, allowed, starts, stands].map((x) =>
        typeof x === "number" ? x.toFixed(2) : x,
      ),
    );
  }
  console.log(
    table(
      [
        "algorithm (1 rule, warm)",
        "no block",
        `no block @${values.baseline}`,
        "block, allowed",
        "block, the denial that starts it",
        "block, a denial while it stands",
      ],
      rows,
    ),
  );
} finally {
  redis.disconnect();
  await server.close?.();
  await server.stop?.();
}
