#!/usr/bin/env node
/**
 * The Lua script alone, against one local redis-server:
 *   node bench/redis/run.mjs [--quick]
 * For each algorithm, 1 rule and 3 rules per call, plain INCR and @upstash/ratelimit's own scripts:
 * EVALSHA ops/s at 50 clients with random identities (100k), non-pipelined and pipelined (16), and Redis
 * server CPU µs per decision (INFO used_cpu_* deltas); billable commands and EVALSHA µs per decision, warm
 * and cold identity (commands.mjs); then Redis bytes per tracked identity.
 * Runs are interleaved (every scenario, then again) and the median of 3 is reported.
 * Prints a markdown table on stdout (progress on stderr) and writes bench/results/redis.json.
 *
 * redis-server is pinned to CPU 0 and redis-benchmark to CPU 1 so they do not fight over one core.
 * Limits are huge so that every call takes the "allowed + write" path (bench/README.md, "How it runs").
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { startRedis } from "../../redis-rest/index.mjs";
import { floodgateScripts } from "../lib/scripts.mjs";
import { median } from "../lib/report.mjs";
import { commandsTable, measureCommands, upstashScript } from "./commands.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const { values } = parseArgs({ options: { quick: { type: "boolean", default: false } } });
const QUICK = values.quick;
const REPETITIONS = QUICK ? 1 : 3;
const IDENTITIES = 100_000;
const CLIENTS = 50;
const OPS = QUICK ? { 1: 10_000, 16: 30_000 } : { 1: 15_000, 16: 50_000 };
const MEMORY_IDENTITIES = 50_000; // the dicts then have 65,536 slots: the same ~10.5 B/key of buckets as 100k
const HUGE = 1_000_000_000;
const PERIOD_MS = 60_000; // @upstash/ratelimit's windows, as the baseline measured them (bench/README.md)

const log = (line) => process.stderr.write(`${line}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const has = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;

// ---- scripts -------------------------------------------------------------------------------------------
const ours = await floodgateScripts();

const ALGORITHMS = [
  ["fixed-window", 1],
  ["sliding-window", 2],
  ["sliding-log", 3],
  ["token-bucket", 4],
  ["gcra", 5],
  ["concurrency", 6],
];

/**
 * One rule's seven ARGV slots (lua/decide/rules.lua's table): algorithm, mode on, limit, period, burst, cost 1,
 * no delay. Every scenario builds its rules here, so a change to the layout is made once.
 */
const ruleSlots = (code, [limit, periodMs, burst]) => [String(code), "1", limit, periodMs, burst, "1", "0"];

/**
 * limit, period (ms), burst such that every call is allowed AND identities stay tracked between hits (steady
 * state, bench/README.md): a day-long window; for the TAT algorithms a slow rate
 * (each call owes 86 s) with a huge burst, since their keys expire as soon as the bucket is full again.
 */
const steadyState = (code) =>
  code === 4 || code === 5 ? ["1000", "86400000", String(HUGE)] : [String(HUGE), "86400000", String(HUGE)];

// ---- scenarios: what redis-benchmark sends (__rand_int__ = a random 12-digit identity) -------------------
function scenarios(sha) {
  const now = Date.now();
  const bucket = Math.floor(now / PERIOD_MS);
  const list = [{ name: "INCR", group: "reference", cmd: ["INCR", "rl:incr:__rand_int__"] }];
  for (const [algorithm, code] of ALGORITHMS) {
    for (const rules of [1, 3]) {
      const keys = [];
      // As the Worker sends it (lua/decide.lua's table): no override key, the request id only for the
      // algorithms that store it.
      const args = [code === 3 || code === 6 || code === 7 ? "__rand_int__" : ""];
      for (let r = 0; r < rules; r++) {
        const rule = `a${code}r${r}`;
        keys.push(`rl:${rule}:__rand_int__`);
        args.push(...ruleSlots(code, steadyState(code)));
      }
      list.push({
        name: `floodgate ${algorithm} ×${rules}`,
        group: algorithm,
        rules,
        cmd: ["EVALSHA", sha.ours, String(keys.length), ...keys, ...args],
      });
    }
  }
  const prefix = "@upstash/ratelimit";
  list.push(
    {
      name: "@upstash/ratelimit fixedWindow",
      group: "fixed-window",
      cmd: [
        "EVALSHA",
        sha.fixedWindow,
        "1",
        `${prefix}:__rand_int__:${bucket}`,
        "1000000",
        String(PERIOD_MS),
        "1",
      ],
    },
    {
      name: "@upstash/ratelimit slidingWindow",
      group: "sliding-window",
      cmd: [
        "EVALSHA",
        sha.slidingWindow,
        "2",
        `${prefix}:__rand_int__:${bucket}`,
        `${prefix}:__rand_int__:${bucket - 1}`,
        "1000000",
        String(now),
        String(PERIOD_MS),
        "1",
      ],
    },
    {
      name: "@upstash/ratelimit tokenBucket",
      group: "token-bucket",
      cmd: [
        "EVALSHA",
        sha.tokenBucket,
        "1",
        `${prefix}:__rand_int__`,
        "1000000",
        String(PERIOD_MS),
        "1000000",
        String(now),
        "1",
      ],
    },
  );
  return list;
}

// ---- measurement ---------------------------------------------------------------------------------------
async function cpuSeconds(redis) {
  const info = await redis.info("cpu");
  const read = (field) => Number(info.match(new RegExp(`${field}:([0-9.]+)`))?.[1] ?? Number.NaN);
  return read("used_cpu_sys") + read("used_cpu_user");
}

function benchmark(
  port,
  cmd,
  pipeline,
  ops = OPS[pipeline] * (cmd[0] === "INCR" && pipeline === 16 ? 4 : 1),
) {
  const n = ops;
  const argv = ["-h", "127.0.0.1", "-p", String(port), "-c", String(CLIENTS), "-n", String(n)];
  argv.push("-r", String(IDENTITIES), "-P", String(pipeline), "--csv", ...cmd);
  const run = pinned
    ? spawnSync("taskset", ["-c", "1", "redis-benchmark", ...argv])
    : spawnSync("redis-benchmark", argv);
  const lines = run.stdout.toString().trim().split("\n");
  const row = lines[lines.length - 1]?.split(",").map((cell) => cell.replace(/"/g, ""));
  const opsPerSecond = Number(row?.[1]);
  if (run.status !== 0 || !Number.isFinite(opsPerSecond)) {
    throw new Error(`redis-benchmark failed: ${run.stderr.toString()}${run.stdout.toString().slice(0, 500)}`);
  }
  return { n, opsPerSecond, p50Ms: Number(row?.[4]), p99Ms: Number(row?.[6]) };
}

async function measure(redis, port, scenario, pipeline) {
  await redis.config("RESETSTAT");
  const cpuBefore = await cpuSeconds(redis);
  const run = benchmark(port, scenario.cmd, pipeline);
  const cpuAfter = await cpuSeconds(redis);
  const stats = await redis.info("commandstats");
  const command = scenario.cmd[0].toLowerCase();
  const usecPerCall = Number(
    stats.match(new RegExp(`cmdstat_${command}:calls=\\d+,usec=\\d+,usec_per_call=([0-9.]+)`))?.[1],
  );
  const failed = Number(stats.match(new RegExp(`cmdstat_${command}:.*failed_calls=(\\d+)`))?.[1] ?? 0);
  if (failed > 0) throw new Error(`${scenario.name}: ${failed} failed calls`);
  return { ...run, serverCpuUsPerOp: ((cpuAfter - cpuBefore) * 1e6) / run.n, usecPerCall };
}

// ---- memory per identity -------------------------------------------------------------------------------
const hashed = (i) => createHash("sha256").update(`user-${i}`).digest().subarray(0, 16).toString("base64url");
const digits = (i) => String(i).padStart(12, "0");

function memoryScenarios(sha) {
  const now = Date.now();
  const bucket = Math.floor(now / 86_400_000);
  const slow = (code) => ruleSlots(code, ["10", "86400000", "10"]); // long TTLs: keys live while measured
  const list = [{ name: "INCR (no TTL)", writes: (id) => [["INCR", `rl:incr:${digits(id)}`]] }];
  for (const [algorithm, code] of ALGORITHMS) {
    for (const [shape, ident, rule] of [["production key: rule `api`, hashed id", hashed, "api"]]) {
      list.push({
        name: `floodgate ${algorithm} (${shape})`,
        group: algorithm,
        shape,
        writes: (id) => {
          const key = `rl:${rule}:${ident(id)}`;
          // With options (lua/decide-with-options.lua: request id, peek, time offset), so the sliding window's
          // steady state can carry the previous window's count too: one unit spent a period ago, one now.
          const at = (offsetMs) => ["EVALSHA", sha.options, "1", key, `r${id}`, "0", offsetMs, ...slow(code)];
          return algorithm === "sliding-window" ? [at("-86400000"), at("0")] : [at("0")];
        },
      });
    }
  }
  const prefix = "@upstash/ratelimit";
  list.push(
    {
      name: "@upstash/ratelimit fixedWindow (12-digit id)",
      group: "fixed-window",
      writes: (id) => [
        ["EVALSHA", sha.fixedWindow, "1", `${prefix}:${digits(id)}:${bucket}`, "10", "86400000", "1"],
      ],
    },
    {
      name: "@upstash/ratelimit slidingWindow, both windows live (12-digit id)",
      group: "sliding-window",
      writes: (id) => {
        const at = (b, t) => [
          "EVALSHA",
          sha.slidingWindow,
          "2",
          `${prefix}:${digits(id)}:${b}`,
          `${prefix}:${digits(id)}:${b - 1}`,
          "10",
          String(t),
          "86400000",
          "1",
        ];
        return [at(bucket - 1, now - 86_400_000), at(bucket, now)];
      },
    },
    {
      name: "@upstash/ratelimit tokenBucket (12-digit id)",
      group: "token-bucket",
      writes: (id) => [
        ["EVALSHA", sha.tokenBucket, "1", `${prefix}:${digits(id)}`, "10", "86400000", "1", String(now), "1"],
      ],
    },
  );
  return list;
}

async function bytesPerIdentity(redis, scenario) {
  await redis.flushall("SYNC");
  await sleep(500);
  const before = Number((await redis.info("memory")).match(/used_memory:(\d+)/)?.[1]);
  for (let start = 0; start < MEMORY_IDENTITIES; start += 2000) {
    const pipeline = redis.pipeline();
    for (let id = start; id < start + 2000; id++)
      for (const command of scenario.writes(id)) pipeline.call(...command);
    const replies = await pipeline.exec();
    const error = replies?.find(([e]) => e);
    if (error) throw new Error(`${scenario.name}: ${error[0]}`);
  }
  await sleep(1500); // incremental rehashing of the main and expires dicts
  const after = Number((await redis.info("memory")).match(/used_memory:(\d+)/)?.[1]);
  const keys = await redis.dbsize();
  // A script call whose arguments no longer match the script's layout decides no rule and writes nothing.
  if (keys === 0) throw new Error(`${scenario.name}: wrote no key`);
  return {
    bytesPerIdentity: (after - before) / MEMORY_IDENTITIES,
    keysPerIdentity: keys / MEMORY_IDENTITIES,
  };
}

// ---- main ----------------------------------------------------------------------------------------------
if (!has("redis-benchmark")) {
  console.log("Not run: redis-benchmark is missing (Debian package redis-tools).");
  process.exit(0);
}
const pinned = has("taskset");
const server = await startRedis();
if (pinned) spawnSync("taskset", ["-cp", "0", String(server.pid())], { stdio: "ignore" });
const redis = new Redis(server.url);
try {
  const sha = {
    ours: await redis.script("LOAD", ours.decide),
    options: await redis.script("LOAD", ours["decide-with-options"]),
    fixedWindow: await redis.script("LOAD", upstashScript("fixedWindowLimitScript")),
    slidingWindow: await redis.script("LOAD", upstashScript("slidingWindowLimitScript")),
    tokenBucket: await redis.script("LOAD", upstashScript("tokenBucketLimitScript")),
  };
  const list = scenarios(sha);
  const runs = new Map(list.map((s) => [s.name, { 1: [], 16: [] }]));
  const started = Date.now();
  // Warm-up (untimed): many identities of every scenario get state, so timed runs mostly update live state.
  for (const scenario of list) benchmark(server.port, scenario.cmd, 16, IDENTITIES / 2);
  log(`warmed up ${list.length} scenarios`);
  for (let rep = 1; rep <= REPETITIONS; rep++) {
    for (const scenario of list) {
      for (const pipeline of [1, 16]) {
        const result = await measure(redis, server.port, scenario, pipeline);
        runs.get(scenario.name)[pipeline].push(result);
        log(
          `rep ${rep} ${scenario.name} P=${pipeline}: ${Math.round(result.opsPerSecond)} ops/s, ${result.serverCpuUsPerOp.toFixed(2)} µs CPU/op`,
        );
      }
    }
  }
  const commands = await measureCommands(redis, { repetitions: REPETITIONS });
  log("billable commands measured");
  const memory = [];
  for (const scenario of memoryScenarios(sha)) {
    const result = await bytesPerIdentity(redis, scenario);
    memory.push({ name: scenario.name, ...result });
    log(`memory ${scenario.name}: ${result.bytesPerIdentity.toFixed(1)} B/identity`);
  }

  const summary = list.map((s) => {
    const r = runs.get(s.name);
    const pick = (p, field) => median(r[p].map((x) => x[field]));
    return {
      name: s.name,
      group: s.group,
      rules: s.rules ?? 1,
      opsPerSecondP1: pick(1, "opsPerSecond"),
      opsPerSecondP16: pick(16, "opsPerSecond"),
      cpuUsPerOpP16: pick(16, "serverCpuUsPerOp"),
      cpuUsPerOpP1: pick(1, "serverCpuUsPerOp"),
      usecPerCallP16: pick(16, "usecPerCall"),
      rawOpsPerSecondP1: r[1].map((x) => Math.round(x.opsPerSecond)),
      rawCpuUsPerOpP16: r[16].map((x) => Number(x.serverCpuUsPerOp.toFixed(2))),
    };
  });
  const incr = summary[0];
  const json = {
    date: new Date().toISOString(),
    quick: QUICK,
    repetitions: REPETITIONS,
    clients: CLIENTS,
    identities: IDENTITIES,
    pinned,
    durationS: Math.round((Date.now() - started) / 1000),
    throughput: summary,
    commands,
    memory,
  };
  mkdirSync(`${root}bench/results`, { recursive: true });
  writeFileSync(`${root}bench/results/redis.json`, `${JSON.stringify(json, null, 2)}\n`);

  const k = (x) => `${(x / 1000).toFixed(1)}k`;
  const out = [
    `Median of ${REPETITIONS} interleaved runs; ${CLIENTS} clients, ${IDENTITIES / 1000}k random identities, every call allowed and written` +
      `${pinned ? "; redis-server on CPU 0, redis-benchmark on CPU 1" : ""}. Server CPU = INFO used_cpu_* delta / calls` +
      " (at P=16 Redis is saturated). Compare rows side by side only: this machine is noisy (±20–40 %).",
    "",
    "| scenario | ops/s P=1 | × INCR (P=1) | ops/s P=16 | server CPU µs/decision (P=16) | script µs/call (commandstats) | raw ops/s P=1 | raw CPU µs P=16 |",
    "|---|---|---|---|---|---|---|---|",
    ...summary.map(
      (s) =>
        `| ${s.name} | ${k(s.opsPerSecondP1)} | ${(s.opsPerSecondP1 / incr.opsPerSecondP1).toFixed(2)} | ${k(s.opsPerSecondP16)} | ` +
        `${s.cpuUsPerOpP16.toFixed(2)} | ${s.usecPerCallP16.toFixed(2)} | ${s.rawOpsPerSecondP1.join(", ")} | ${s.rawCpuUsPerOpP16.join(", ")} |`,
    ),
    "",
    "Billable commands per decision (Upstash bills the EVALSHA and every command the script runs: the sum of `calls` " +
      "over INFO commandstats / decisions) and Redis µs per decision (EVALSHA usec_per_call); cold = an identity's first " +
      "decision, warm = its second; every call allowed (bench/redis/commands.mjs; `--before <ref>` adds an older script):",
    "",
    commandsTable(commands),
    "",
    `Redis memory per tracked identity (used_memory delta over ${MEMORY_IDENTITIES / 1000}k identities, each written once with a long period; ` +
      "the sliding windows' state carries both windows):",
    "",
    "| scenario | bytes / identity | keys / identity |",
    "|---|---|---|",
    ...memory.map(
      (m) => `| ${m.name} | ${m.bytesPerIdentity.toFixed(1)} | ${m.keysPerIdentity.toFixed(2)} |`,
    ),
  ];
  console.log(out.join("\n"));
} finally {
  redis.disconnect();
  await server.close();
}
