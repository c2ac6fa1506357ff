#!/usr/bin/env node
/**
 * Each script call's worst case for the largest inputs the configuration accepts, in Redis time:
 *   node bench/redis/worst-case.mjs [--members <n>] [--before <git ref>]
 * One private redis-server, SLOWLOG at 0 µs: each row is the script call's own execution time in Redis
 * (`SLOWLOG GET`'s duration, µs: what blocks every other client), the lowest of 3 runs, and the key's
 * memory after it (`MEMORY USAGE`). `--members` is the most requests a sliding-log window holds (default
 * MAX_LOG_REQUESTS, src/engine/algorithms/sliding-log.ts). With `--before`, the one script of that git ref
 * (lua/floodgate.lua) also runs the one-request-of-cost-1,000,000 case, as it was.
 */
import { execFileSync } from "node:child_process";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { startRedis, stripKeyLocking } from "../../redis-rest/index.mjs";
import { floodgateScripts } from "../lib/scripts.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const HOUR_MS = "3600000";
const BIG = "1000000000";
/** MAX_LOG_REQUESTS (src/engine/algorithms/sliding-log.ts): the most requests one sliding-log window holds. */
const MAX_LOG_REQUESTS = 10_000;

/** One rule's group (lua/decide/rules.lua): algorithm, mode on, limit, period, burst, cost, no delay. */
const group = (code, limit, cost, periodMs = HOUR_MS, burst = limit) => [
  code,
  "1",
  String(limit),
  periodMs,
  String(burst),
  String(cost),
  "0",
];

/** Runs `command` `times` times (`before()` sets the state up each time); its lowest SLOWLOG duration, µs. */
async function timed(redis, command, { before = async () => {}, times = 3 } = {}) {
  let best = Number.POSITIVE_INFINITY;
  let reply;
  for (let i = 0; i < times; i++) {
    await before();
    await redis.slowlog("RESET");
    reply = await redis.call(...command);
    const [entry] = await redis.slowlog("GET", 1);
    best = Math.min(best, Number(entry[2]));
  }
  return { us: best, reply };
}

export async function worstCases(redis, { members, before }) {
  const scripts = await floodgateScripts();
  const sha = {};
  for (const [name, source] of Object.entries(scripts)) sha[name] = await redis.script("LOAD", source);
  await redis.config("SET", "slowlog-log-slower-than", "0");
  const rows = [];
  const memory = async (key) => Number((await redis.memory("USAGE", key)) ?? 0);
  const fill = async (key, limit, count, offsetMs = "0") => {
    await redis.del(key);
    for (let start = 0; start < count; start += 1000) {
      const pipeline = redis.pipeline();
      for (let j = start; j < Math.min(count, start + 1000); j++) {
        pipeline.evalsha(sha["decide-with-options"], 1, key, `r${j}`, "0", offsetMs, ...group("3", limit, 1));
      }
      await pipeline.exec();
    }
  };
  const row = (call, input, work, { us, reply }, bytes) => {
    rows.push({ call, input, work, us, bytes });
    return reply;
  };

  // Sliding-log: one request of cost 1,000,000 under a limit of 1e9 (the attack; accepted: 1,000 requests).
  const big = "bench:log:big";
  row(
    "decide (sliding-log)",
    "one request of cost 1,000,000, limit 1e9",
    "O(1)",
    await timed(redis, ["EVALSHA", sha.decide, "1", big, "r", ...group("3", BIG, 1_000_000)], {
      before: () => redis.del(big),
    }),
    await memory(big),
  );
  if (before) {
    const text = execFileSync("git", ["-C", root, "show", `${before}:lua/floodgate.lua`], {
      encoding: "utf8",
    });
    const old = await redis.script("LOAD", stripKeyLocking(text));
    const oldKey = "bench:log:before";
    row(
      `decide (sliding-log), ${before}`,
      "one request of cost 1,000,000, limit 1e9",
      "O(cost)",
      await timed(redis, ["EVALSHA", old, "1", oldKey, "1", "r", ...group("3", BIG, 1_000_000)], {
        before: () => redis.del(oldKey),
        times: 1,
      }),
      await memory(oldKey),
    );
    await redis.del(oldKey);
  }

  // Sliding-log with `members` requests in the window (the most a rule's limit and cost let in).
  const full = "bench:log:full";
  const limit = members;
  await fill(full, limit, members);
  row(
    "decide (sliding-log)",
    `denied, waiting for the last of ${members} requests`,
    "O(requests in the window)",
    await timed(redis, ["EVALSHA", sha.decide, "1", full, "r-new", ...group("3", limit, limit)]),
    await memory(full),
  );
  // All of them left the window since the last write: one decision removes them (an hour later).
  row(
    "decide (sliding-log)",
    `${members} requests just left the window`,
    "O(requests that left)",
    await timed(
      redis,
      ["EVALSHA", sha["decide-with-options"], "1", full, "r-late", "0", "3600001", ...group("3", limit, 1)],
      { before: () => fill(full, limit, members) },
    ),
    await memory(full),
  );
  // A key the layout before wrote: one member per unit, no `total`: recounted once.
  const legacy = "bench:log:legacy";
  const now = Date.now() * 1000;
  const seedLegacy = async () => {
    await redis.del(legacy);
    for (let start = 0; start < members; start += 1000) {
      const args = [];
      for (let j = start; j < Math.min(members, start + 1000); j++)
        args.push(String(now), `old:${now}:${j + 1}`);
      await redis.zadd(legacy, ...args);
    }
    await redis.pexpire(legacy, 3_600_000);
  };
  row(
    "decide (sliding-log)",
    `a key of the layout before with ${members} units`,
    "O(units in the window), once",
    await timed(redis, ["EVALSHA", sha.decide, "1", legacy, "r", ...group("3", limit + 1, 1)], {
      before: seedLegacy,
    }),
    await memory(legacy),
  );
  // A refund with `when` unknown: the window's members read for the request id's (one of them).
  row(
    "refund (sliding-log)",
    `\`when\` unknown, a window of ${members} requests`,
    "O(requests in the window)",
    await timed(
      redis,
      ["EVALSHA", sha.refund, "2", full, `${full}:reset`, `r${members - 1}`, "0", ...group("3", limit, 1)],
      { before: () => fill(full, limit, members) },
    ),
    await memory(full),
  );
  row(
    "fence (admin reset)",
    `deletes a sliding-log key of ${members} requests`,
    "O(requests in the window)",
    await timed(redis, ["EVALSHA", sha.fence, "2", `${full}:reset`, full, "1000", "0", "30000"], {
      before: () => fill(full, limit, members),
    }),
    0,
  );

  // The other algorithms and calls: a constant number of commands per rule.
  const bucket = "bench:bucket";
  row(
    "decide (token-bucket)",
    "cost 1e9, burst 1e9",
    "O(1) per rule",
    await timed(redis, ["EVALSHA", sha.decide, "1", bucket, "", ...group("4", BIG, BIG, HOUR_MS, BIG)], {
      before: () => redis.del(bucket),
    }),
    await memory(bucket),
  );
  const rules = 16;
  const keys = Array.from({ length: rules }, (_, i) => `bench:many:${i}`);
  const groups = keys.flatMap(() => group("4", BIG, 1, HOUR_MS, BIG));
  row(
    "lease",
    `${rules} token-bucket rules, each leasing`,
    "O(rules)",
    await timed(redis, [
      "EVALSHA",
      sha.lease,
      String(rules),
      ...keys,
      "r",
      "1000",
      "0",
      ...groups,
      ...keys.map(() => "100"),
    ]),
    0,
  );
  const counter = "bench:fixed";
  await redis.set(counter, "5", "PX", 60_000);
  row("reaim", "one counter", "O(1)", await timed(redis, ["EVALSHA", sha.reaim, "1", counter, "60000"]), 0);
  row(
    "give-back",
    "one reservation",
    "O(1)",
    await timed(redis, ["EVALSHA", sha["give-back"], "2", bucket, `${bucket}:reset`, "1", "0", "0"]),
    0,
  );
  return rows;
}

export function worstCaseTable(rows) {
  const lines = ["| call | largest input | work | Redis µs | key bytes after |", "|---|---|---|---|---|"];
  for (const r of rows) {
    lines.push(`| ${r.call} | ${r.input} | ${r.work} | ${r.us} | ${r.bytes > 0 ? r.bytes : "–"} |`);
  }
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const { values } = parseArgs({ options: { members: { type: "string" }, before: { type: "string" } } });
  const members = Number(values.members ?? MAX_LOG_REQUESTS);
  const server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const rows = await worstCases(redis, { members, before: values.before });
    console.log(worstCaseTable(rows));
  } finally {
    redis.disconnect();
    await server.close();
  }
}
