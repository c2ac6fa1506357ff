/**
 * Settling a cost from the response (docs/settle.md), side by side under `workerd serve`: the same 10 MB
 * server-sent-event stream through a rule with `settle = "sse:usage.total_tokens"` and through the same rule
 * without it, every target once per round (the order rotated round by round), one client at a time.
 * - stream: each round's settled / plain ratios of throughput and of time to first byte, taken within the
 *   round (drift on this shared machine between rounds hits both alike), reported as the median and the spread
 *   over rounds; and each target's workerd CPU per 10 MB (the process's own accounting, nanoseconds:
 *   /proc/<pid>/task/<tid>/schedstat, summed over its threads, from before the request to its end);
 * - billed commands per request (INFO commandstats, every command a script runs included, the INFO calls
 *   themselves excluded), for a fixed-window and a token-bucket rule, plain and settled.
 * Both rules are decided by Redis (`lease = false` on the plain one: a settled rule is never leased).
 * `--baseline REV` adds the settled rule at another revision (its src/ and lua/) to the same rounds.
 *
 *   node bench/settle.mjs [--rounds 12] [--mb 10] [--write 65536] [--requests 200] [--baseline main]
 *   (--requests 0: the stream only)
 */
import { readdirSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { extractBaseline } from "./lib/baseline.mjs";
import { startFloodgate } from "./lib/floodgate.mjs";
import { freePort, startProcess, stopAll } from "./lib/procs.mjs";
import { fmt, median, quantile, table } from "./lib/report.mjs";
import { restCommand, startRedis, startRest } from "./lib/stack.mjs";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "12" },
    mb: { type: "string", default: "10" },
    requests: { type: "string", default: "200" },
    baseline: { type: "string" },
    write: { type: "string", default: String(64 * 1024) },
  },
});
const rounds = Number(values.rounds);
const mb = Number(values.mb);
const requests = Number(values.requests);
/** Bytes per write of the origin: 64 KiB, or about one event (200) as a model streams its tokens. */
const write = Number(values.write);

const HUGE = 1_000_000_000;
const SETTLE = "sse:usage.total_tokens";
/** One rule per algorithm, on its own path; `settled` adds the settle source. */
const rules = (settled) =>
  [
    ["fw", "fixed-window"],
    ["tb", "token-bucket"],
  ].map(([path, algorithm]) => ({
    name: `bench-${path}`,
    match: { path: `/${path}/*` },
    key: "header:authorization",
    algorithm,
    limit: HUGE,
    period: "1h",
    ...(settled ? { settle: SETTLE } : { lease: false }),
  }));

/**
 * Seconds of CPU `pid` has run, every thread summed, to the nanosecond (the scheduler's own account; utime and
 * stime in /proc/<pid>/stat count 10 ms ticks, as coarse as a whole 10 MB stream's pass-through).
 */
function cpuSeconds(pid) {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // The thread ended between the listing and the read: its time is no longer counted in either reading.
    }
  }
  return ns / 1e9;
}

/** Reads one response to its end: ms to the first body byte, ms in all, bytes. */
async function timed(url, headers) {
  const startedAt = performance.now();
  const response = await fetch(url, { headers });
  if (response.status !== 200) throw new Error(`${url}: ${response.status} ${await response.text()}`);
  const reader = response.body.getReader();
  let firstByteMs;
  let bytes = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    firstByteMs ??= performance.now() - startedAt;
    bytes += value.byteLength;
  }
  return { firstByteMs, totalMs: performance.now() - startedAt, bytes };
}

/** Calls per command name Redis has served, `info` left out (the bench's own reads). */
async function commandCalls(rest) {
  const info = String(await restCommand(rest, ["INFO", "commandstats"]));
  let total = 0;
  const each = {};
  for (const m of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) {
    if (m[1] === "info") continue;
    each[m[1]] = Number(m[2]);
    total += Number(m[2]);
  }
  return { total, each };
}

/** `values`' median and spread: `median (min–max)`, or with `quartiles` `median (q1–q3; min–max)`. */
function spread(values, digits, quartiles = false) {
  const q = (p) => fmt(quantile(values, p), digits);
  const range = `${q(0)}–${q(1)}`;
  return `${q(0.5)} (${quartiles ? `${q(0.25)}–${q(0.75)}; ${range}` : range})`;
}

async function main() {
  const redis = await startRedis();
  const rest = await startRest(redis.url);
  const originPort = await freePort();
  await startProcess(
    "sse-origin",
    process.execPath,
    [fileURLToPath(new URL("lib/sse-origin.mjs", import.meta.url)), String(originPort)],
    { ready: /origin listening/ },
  );
  const origin = { url: `http://127.0.0.1:${originPort}` };
  const targets = [
    { id: "plain", label: "plain rule", settled: false },
    { id: "settled", label: `settle = "${SETTLE}"`, settled: true },
  ];
  if (values.baseline) {
    targets.push({
      id: "baseline",
      label: `settle = "${SETTLE}", @${values.baseline}`,
      settled: true,
      entry: `${extractBaseline(values.baseline)}/src/worker.ts`,
    });
  }
  for (const target of targets) {
    target.worker = await startFloodgate(`settle-${target.id}`, {
      rest,
      origin,
      rules: rules(target.settled),
      prefix: `bench-settle-${target.id}`,
      ...(target.entry ? { entry: target.entry } : {}),
    });
    target.ttfb = [];
    target.mbps = [];
    target.cpuMs = [];
  }

  // Stream: one client at a time, every target once per round, the order rotated; two warm-up requests each.
  const headers = { authorization: "Bearer bench" };
  for (const target of targets) {
    for (let i = 0; i < 2; i++) await timed(`${target.worker.url}/fw/warm?mb=1`, headers);
  }
  for (let round = 0; round < rounds; round++) {
    const order = targets.map((_, i) => targets[(i + round) % targets.length]);
    for (const target of round % 2 === 0 ? order : order.reverse()) {
      const cpuBefore = cpuSeconds(target.worker.pid);
      const { firstByteMs, totalMs, bytes } = await timed(
        `${target.worker.url}/fw/stream?mb=${mb}&write=${write}`,
        headers,
      );
      // The settlement runs after the body's end (waitUntil): a moment for it to land in this request's CPU.
      await sleep(20);
      target.cpuMs.push((cpuSeconds(target.worker.pid) - cpuBefore) * 1000 * (10 / mb));
      target.ttfb.push(firstByteMs);
      target.mbps.push(bytes / 1024 / 1024 / (totalMs / 1000));
    }
  }

  // Commands: `requests` small streams per target and algorithm, one at a time, settlements landed before the
  // count is read (they run after the response).
  const commands = [];
  for (const [path, algorithm] of requests > 0
    ? [
        ["fw", "fixed-window"],
        ["tb", "token-bucket"],
      ]
    : []) {
    const row = { algorithm };
    for (const target of targets.slice(0, 2)) {
      const who = { authorization: `Bearer ${target.id}-${path}-${Date.now()}` };
      await timed(`${target.worker.url}/${path}/warm?mb=0.01`, who); // the identity's state exists
      await sleep(200);
      const before = await commandCalls(rest);
      for (let i = 0; i < requests; i++) await timed(`${target.worker.url}/${path}/x?mb=0.01`, who);
      await sleep(500);
      const after = await commandCalls(rest);
      const per = {};
      for (const [name, calls] of Object.entries(after.each)) {
        const delta = calls - (before.each[name] ?? 0);
        if (delta > 0) per[name] = delta / requests;
      }
      row[target.id] = { total: (after.total - before.total) / requests, per };
    }
    commands.push(row);
  }

  const [plain, ...settled] = targets;
  // Within each round: a settled target's throughput over the plain rule's, and the plain rule's time to first
  // byte over the settled one's (so that for both, 1 is "as good as plain" and the goal is ≥ 0.95).
  const perRound = (target, f) => target.mbps.map((_, round) => f(round));
  const lines = [
    `Settle bench: ${rounds} rounds of a ${mb} MB SSE stream written ${write} bytes at a time, one client, every target once a round; medians (min–max over rounds).`,
    "",
    table(
      ["target", "time to first byte, ms", "throughput, MB/s", "workerd CPU per 10 MB, ms"],
      targets.map((t) => [t.label, spread(t.ttfb, 1), spread(t.mbps, 0), spread(t.cpuMs, 1)]),
    ),
    "",
    table(
      [
        "per round, vs the plain rule",
        "throughput × plain (median; q1–q3; min–max)",
        "time to first byte: plain ÷ settled",
        "workerd CPU above plain per 10 MB, ms",
      ],
      settled.map((t) => [
        t.label,
        spread(
          perRound(t, (i) => t.mbps[i] / plain.mbps[i]),
          2,
          true,
        ),
        spread(
          perRound(t, (i) => plain.ttfb[i] / t.ttfb[i]),
          2,
          true,
        ),
        spread(
          perRound(t, (i) => t.cpuMs[i] - plain.cpuMs[i]),
          1,
        ),
      ]),
    ),
    `goal: throughput and time to first byte ≥ 0.95 × plain (docs/settle.md, "What it costs"); per-round medians: ${settled
      .map(
        (t) =>
          `${t.id} throughput ${fmt(median(perRound(t, (i) => t.mbps[i] / plain.mbps[i])), 2)}×, first byte ${fmt(median(perRound(t, (i) => plain.ttfb[i] / t.ttfb[i])), 2)}×`,
      )
      .join("; ")}`,
  ];
  if (commands.length > 0) {
    lines.push(
      "",
      table(
        ["rule", "billed commands / request, plain", "settled", "× plain", "settled, per command"],
        commands.map((row) => [
          row.algorithm,
          fmt(row.plain.total, 2),
          fmt(row.settled.total, 2),
          fmt(row.settled.total / row.plain.total, 2),
          Object.entries(row.settled.per)
            .map(([name, n]) => `${name} ${fmt(n, 2)}`)
            .join(", "),
        ]),
      ),
    );
  }
  console.log(lines.join("\n"));
}

try {
  await main();
} finally {
  await stopAll();
}
