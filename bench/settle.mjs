/**
 * Settling a cost from the response (docs/settle.md), side by side under `workerd serve`: the same 10 MB
 * server-sent-event stream through a rule with `settle = "sse:usage.total_tokens"` and through the same rule
 * without it, interleaved round by round so drift on this shared machine hits both alike; medians reported.
 * - stream: time to first byte and throughput of the whole body, read by one client at a time;
 * - billed commands per request (INFO commandstats, every command a script runs included, the INFO calls
 *   themselves excluded), for a fixed-window and a token-bucket rule, plain and settled.
 * Both rules are decided by Redis (`lease = false` on the plain one: a settled rule is never leased).
 *
 *   node bench/settle.mjs [--rounds 10] [--mb 10] [--requests 200]
 */
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { startFloodgate } from "./lib/floodgate.mjs";
import { cpuSeconds, freePort, startProcess, stopAll } from "./lib/procs.mjs";
import { fmt, median, table } from "./lib/report.mjs";
import { restCommand, startRedis, startRest } from "./lib/stack.mjs";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "10" },
    mb: { type: "string", default: "10" },
    requests: { type: "string", default: "200" },
  },
});
const rounds = Number(values.rounds);
const mb = Number(values.mb);
const requests = Number(values.requests);

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
    { id: "plain", label: "plain rule" },
    { id: "settled", label: `rule with settle = "${SETTLE}"` },
  ];
  for (const target of targets) {
    target.worker = await startFloodgate(`settle-${target.id}`, {
      rest,
      origin,
      rules: rules(target.id === "settled"),
      prefix: `bench-settle-${target.id}`,
    });
    target.ttfb = [];
    target.mbps = [];
    target.cpuMs = [];
  }

  // Stream: one client at a time, the two targets alternating, a warm-up request each first.
  const headers = { authorization: "Bearer bench" };
  for (const target of targets) await timed(`${target.worker.url}/fw/warm?mb=1`, headers);
  for (let round = 0; round < rounds; round++) {
    for (const target of round % 2 === 0 ? targets : [...targets].reverse()) {
      const cpuBefore = cpuSeconds(target.worker.pid);
      const { firstByteMs, totalMs, bytes } = await timed(`${target.worker.url}/fw/stream?mb=${mb}`, headers);
      target.cpuMs.push((cpuSeconds(target.worker.pid) - cpuBefore) * 1000);
      target.ttfb.push(firstByteMs);
      target.mbps.push(bytes / 1024 / 1024 / (totalMs / 1000));
    }
  }

  // Commands: `requests` small streams per target and algorithm, one at a time, settlements landed before the
  // count is read (they run after the response).
  const commands = [];
  for (const [path, algorithm] of [
    ["fw", "fixed-window"],
    ["tb", "token-bucket"],
  ]) {
    const row = { algorithm };
    for (const target of targets) {
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

  const [plain, settled] = targets;
  const ratio = (a, b) => fmt(a / b, 2);
  const lines = [
    `Settle bench: ${rounds} interleaved rounds of a ${mb} MB SSE stream, one client; ${requests} requests per command count.`,
    "",
    table(
      ["target", "TTFB ms (median)", "MB/s (median)", "workerd CPU ms per stream (median)"],
      targets.map((t) => [t.label, fmt(median(t.ttfb), 1), fmt(median(t.mbps), 0), fmt(median(t.cpuMs), 0)]),
    ),
    "",
    `settled / plain: throughput ${ratio(median(settled.mbps), median(plain.mbps))}×, time to first byte ${ratio(median(settled.ttfb), median(plain.ttfb))}× (lower is better)`,
    "",
    table(
      ["rule", "billed commands / request, plain", "settled", "× plain", "settled, per command"],
      commands.map((row) => [
        row.algorithm,
        fmt(row.plain.total, 2),
        fmt(row.settled.total, 2),
        ratio(row.settled.total, row.plain.total),
        Object.entries(row.settled.per)
          .map(([name, n]) => `${name} ${fmt(n, 2)}`)
          .join(", "),
      ]),
    ),
  ];
  console.log(lines.join("\n"));
}

try {
  await main();
} finally {
  await stopAll();
}
