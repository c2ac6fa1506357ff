#!/usr/bin/env node
/**
 * What one decision costs on Upstash's bill and in Redis CPU, side by side with @upstash/ratelimit:
 *   node bench/redis/commands.mjs [--before <git ref>]      (also part of bench/redis/run.mjs)
 * Upstash bills the EVALSHA plus every command the script runs, so "billable commands per decision" is the
 * sum of `calls` over every command in INFO commandstats (EVALSHA included) divided by the decisions made;
 * Redis µs per decision is EVALSHA's usec_per_call (script execution inside Redis, without network I/O).
 * Each scenario: COLD = every identity's first decision (state created), WARM = its second one (state
 * live, every call allowed). With `--before <ref>`, the one script of that git ref (lua/floodgate.lua, before
 * the scripts were split by call kind) runs in the same run for a before/after comparison.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { startRedis, stripKeyLocking } from "../../redis-rest/index.mjs";
import { floodgateScripts } from "../lib/scripts.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const IDENTITIES = 2000;
const HUGE = "1000000000";
const DAY_MS = "86400000";
const PERIOD_MS = 60_000; // @upstash/ratelimit's window

export const ALGORITHMS = [
  ["fixed-window", "1"],
  ["sliding-window", "2"],
  ["sliding-log", "3"],
  ["token-bucket", "4"],
  ["gcra", "5"],
  ["concurrency", "6"],
  ["shed", "7"],
];

/** limit, period, burst: every call allowed, state kept between the two hits (a day; slow TAT rate). */
const steady = (code) => (code === "4" || code === "5" ? ["1000", DAY_MS, HUGE] : [HUGE, DAY_MS, HUGE]);

/** @upstash/ratelimit's single-region script `name`, from its dist, shebang removed for stock Redis. */
export function upstashScript(name) {
  const require = createRequire(import.meta.url);
  const dist = readFileSync(require.resolve("@upstash/ratelimit").replace(/index\.js$/, "index.mjs"), "utf8");
  const match = dist.match(new RegExp(`var ${name} = \`([^\`]*)\``));
  if (!match?.[1]) throw new Error(`${name} not found in @upstash/ratelimit`);
  return match[1].replace(/^#!lua[^\n]*\n/, "");
}

/** The EVALSHA of one plain Floodgate decision as the Worker sends it (lua/decide.lua's table). */
function floodgateCall(sha, code, rules, id) {
  const keys = [];
  const needsId = code === "3" || code === "6" || code === "7";
  const args = [needsId ? `req-${id}-${Math.random()}` : ""];
  for (let r = 0; r < rules; r++) {
    keys.push(`rl:a${code}r${r}:${id}`);
    args.push(code, "1", ...steady(code), "1", "0"); // cost 1, no delay
  }
  return ["EVALSHA", sha, String(keys.length), ...keys, ...args];
}

/** The same decision to the one script before the split by call kind (ARGV[1] "0", or "1" and the id). */
function beforeCall(sha, code, rules, id) {
  const keys = [];
  const needsId = code === "3" || code === "6" || code === "7";
  const args = needsId ? ["1", `req-${id}-${Math.random()}`] : ["0"];
  for (let r = 0; r < rules; r++) {
    keys.push(`rl:b${code}r${r}:${id}`);
    args.push(code, "1", ...steady(code), "1", "0");
  }
  return ["EVALSHA", sha, String(keys.length), ...keys, ...args];
}

function upstashCalls(sha) {
  const prefix = "@upstash/ratelimit";
  return [
    [
      "fixed-window",
      (id, now) => {
        const bucket = Math.floor(now / PERIOD_MS);
        return ["EVALSHA", sha.fixedWindow, "1", `${prefix}:${id}:${bucket}`, HUGE, String(PERIOD_MS), "1"];
      },
    ],
    [
      "sliding-window",
      (id, now) => {
        const bucket = Math.floor(now / PERIOD_MS);
        const [cur, prev] = [`${prefix}:${id}:${bucket}`, `${prefix}:${id}:${bucket - 1}`];
        return ["EVALSHA", sha.slidingWindow, "2", cur, prev, HUGE, String(now), String(PERIOD_MS), "1"];
      },
    ],
    [
      "token-bucket",
      (id, now) => [
        "EVALSHA",
        sha.tokenBucket,
        "1",
        `${prefix}:${id}`,
        HUGE,
        String(PERIOD_MS),
        HUGE,
        String(now),
        "1",
      ],
    ],
  ];
}

/** Billable commands and EVALSHA µs per decision of `count` decisions built by `build(id)`. */
async function measureRun(redis, build, ids) {
  await redis.config("RESETSTAT");
  for (let start = 0; start < ids.length; start += 200) {
    const pipeline = redis.pipeline();
    for (const id of ids.slice(start, start + 200)) pipeline.call(...build(id, Date.now()));
    const replies = await pipeline.exec();
    const error = replies?.find(([e]) => e);
    if (error) throw new Error(String(error[0]));
  }
  const stats = await redis.info("commandstats");
  let calls = 0;
  let evalshaUsec = Number.NaN;
  for (const [, command, n, perCall] of stats.matchAll(
    /cmdstat_([a-z|]+):calls=(\d+),usec=\d+,usec_per_call=([0-9.]+)/g,
  )) {
    if (command === "config" || command === "info") continue;
    calls += Number(n);
    if (command === "evalsha") evalshaUsec = Number(perCall);
  }
  return { commands: calls / ids.length, usecPerCall: evalshaUsec };
}

/** Cold then warm, for every scenario; interleaved `repetitions` times, the lowest reported. */
export async function measureCommands(redis, { before, repetitions = 3 } = {}) {
  const sha = {
    ours: await redis.script("LOAD", (await floodgateScripts()).decide),
    fixedWindow: await redis.script("LOAD", upstashScript("fixedWindowLimitScript")),
    slidingWindow: await redis.script("LOAD", upstashScript("slidingWindowLimitScript")),
    tokenBucket: await redis.script("LOAD", upstashScript("tokenBucketLimitScript")),
  };
  if (before) {
    const text = execFileSync("git", ["-C", root, "show", `${before}:lua/floodgate.lua`], {
      encoding: "utf8",
    });
    sha.before = await redis.script("LOAD", stripKeyLocking(text));
  }
  const scenarios = [];
  for (const [algorithm, code] of ALGORITHMS) {
    for (const rules of [1, 3]) {
      scenarios.push({
        name: `floodgate ${algorithm} ×${rules}`,
        algorithm,
        rules,
        who: "floodgate",
        build: (id) => floodgateCall(sha.ours, code, rules, id),
      });
      if (before)
        scenarios.push({
          name: `floodgate before ${algorithm} ×${rules}`,
          algorithm,
          rules,
          who: "before",
          build: (id) => beforeCall(sha.before, code, rules, id),
        });
    }
  }
  for (const [algorithm, build] of upstashCalls(sha)) {
    scenarios.push({ name: `@upstash/ratelimit ${algorithm}`, algorithm, rules: 1, who: "upstash", build });
  }
  const runs = new Map(scenarios.map((s) => [s.name, []]));
  for (let rep = 0; rep < repetitions; rep++) {
    for (const scenario of scenarios) {
      const ids = Array.from(
        { length: IDENTITIES },
        (_, i) => `${rep}-${i}-${Math.random().toString(36).slice(2, 10)}`,
      );
      const cold = await measureRun(redis, scenario.build, ids);
      const warm = await measureRun(redis, scenario.build, ids);
      runs.get(scenario.name).push({ cold, warm });
    }
  }
  // The lowest of the runs: on a shared machine preemption only ever adds time to usec_per_call.
  const lowest = (xs) => Math.min(...xs);
  return scenarios.map((s) => {
    const r = runs.get(s.name);
    const pick = (phase, field) => lowest(r.map((x) => x[phase][field]));
    return {
      name: s.name,
      algorithm: s.algorithm,
      rules: s.rules,
      who: s.who,
      warmCommands: pick("warm", "commands"),
      coldCommands: pick("cold", "commands"),
      warmUsec: pick("warm", "usecPerCall"),
      coldUsec: pick("cold", "usecPerCall"),
      rawWarmUsec: r.map((x) => x.warm.usecPerCall),
    };
  });
}

/** The markdown table: one row per algorithm and rule count, Floodgate (before) and @upstash/ratelimit side by side. */
export function commandsTable(rows) {
  const hasBefore = rows.some((r) => r.who === "before");
  const find = (who, algorithm, rules) =>
    rows.find((r) => r.who === who && r.algorithm === algorithm && r.rules === rules);
  const cmd = (r) => (r ? `${r.warmCommands.toFixed(2)} / ${r.coldCommands.toFixed(2)}` : "–");
  const us = (r) => (r ? `${r.warmUsec.toFixed(2)} / ${r.coldUsec.toFixed(2)}` : "–");
  const header = ["algorithm", "rules", "Floodgate commands warm / cold", "Floodgate EVALSHA µs warm / cold"];
  if (hasBefore) header.push("before: commands warm / cold", "before: µs warm / cold");
  header.push("@upstash/ratelimit commands warm / cold", "@upstash/ratelimit µs warm / cold");
  const lines = [`| ${header.join(" | ")} |`, `|${header.map(() => "---").join("|")}|`];
  for (const [algorithm] of ALGORITHMS) {
    for (const rules of [1, 3]) {
      const ours = find("floodgate", algorithm, rules);
      const cells = [algorithm, String(rules), cmd(ours), us(ours)];
      if (hasBefore) cells.push(cmd(find("before", algorithm, rules)), us(find("before", algorithm, rules)));
      const theirs = rules === 1 ? find("upstash", algorithm, 1) : undefined;
      cells.push(cmd(theirs), us(theirs));
      lines.push(`| ${cells.join(" | ")} |`);
    }
  }
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const { values } = parseArgs({
    options: { before: { type: "string" }, repetitions: { type: "string", default: "3" } },
  });
  const server = await startRedis();
  const redis = new Redis(server.url);
  try {
    const rows = await measureCommands(redis, {
      before: values.before,
      repetitions: Number(values.repetitions),
    });
    console.log(
      `Billable commands (every command in INFO commandstats, EVALSHA included) and EVALSHA usec_per_call per decision; ` +
        `${IDENTITIES} identities, cold = first decision of an identity, warm = its second; every call allowed; lowest of ${values.repetitions} interleaved runs (the machine is shared: preemption only adds).\n`,
    );
    console.log(commandsTable(rows));
  } finally {
    redis.disconnect();
    await server.close();
  }
}
