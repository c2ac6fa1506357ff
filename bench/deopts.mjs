#!/usr/bin/env node
/**
 * Does the leased path stay optimized? A hot identity's load stops and starts again (as every round of the
 * overhead benchmark does: the identity idles while the other targets run), so its lease runs out and the
 * first requests of the next burst are decided by Redis between thousands decided from leases. V8 traces
 * (`--trace-opt --trace-deopt`) of one Floodgate workerd count, per burst, the functions thrown back to
 * the interpreter and the time spent compiling them again (on V8's background threads, but the process's
 * CPU all the same). `--baseline REV` runs another revision the same way, after this checkout.
 *
 *   node bench/deopts.mjs [--baseline main] [--bursts 6] [--seconds 4] [--idle 8] [--warmup 20]
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { extractBaseline } from "./lib/baseline.mjs";
import { IP_HEADER, startProxyingFloodgate } from "./lib/floodgate.mjs";
import { stopAll } from "./lib/procs.mjs";
import { fmt, table } from "./lib/report.mjs";
import { startOrigin, startRedis, startRest } from "./lib/stack.mjs";
import { runWrk } from "./lib/wrk.mjs";

const { values } = parseArgs({
  options: {
    baseline: { type: "string" },
    bursts: { type: "string", default: "6" },
    seconds: { type: "string", default: "4" },
    idle: { type: "string", default: "8" },
    warmup: { type: "string", default: "20" },
  },
});
const bursts = Number(values.bursts);
const HEADERS = { [IP_HEADER]: "203.0.113.7" };
// As in bench/overhead.mjs (c): one sliding-window rule no load here can exhaust.
const rules = [{ name: "bench-ip", key: "ip", algorithm: "sliding-window", limit: 1_000_000, period: "60s" }];

/** What one burst's trace lines say: deoptimizations (by function) and compile time, ms. */
function tally(lines) {
  const deopted = new Map();
  let compiles = 0;
  let compileMs = 0;
  for (const line of lines) {
    const bailout = /^\[bailout \(kind: [^,]+, reason: ([^)]*)\).*?<JSFunction ([^ >]*)/.exec(line);
    if (bailout) {
      // An anonymous function is printed as "<JSFunction (sfi = …)>".
      const fn = bailout[2]?.startsWith("(") ? "(anonymous)" : bailout[2];
      const name = `${fn}: ${bailout[1]}`;
      deopted.set(name, (deopted.get(name) ?? 0) + 1);
    }
    // "[completed compiling … - took 0.012, 4.390, 0.029 ms]": prepare, execute (the compile), finalize.
    const compiled = /^\[completed compiling .* took ([\d.]+), ([\d.]+), ([\d.]+) ms/.exec(line);
    if (compiled) {
      compiles++;
      compileMs += Number(compiled[1]) + Number(compiled[2]) + Number(compiled[3]);
    }
  }
  const deopts = [...deopted.values()].reduce((a, b) => a + b, 0);
  return { deopts, compiles, compileMs, deopted };
}

async function measure(label, entry, stack) {
  let lines = [];
  let partial = "";
  const onOutput = (chunk) => {
    const text = partial + chunk;
    const complete = text.split("\n");
    partial = complete.pop() ?? "";
    lines.push(...complete);
  };
  const { worker, skipped } = await startProxyingFloodgate(
    label.replace(/\W+/g, "-"),
    {
      ...stack,
      rules,
      prefix: `deopts-${Date.now()}`,
      entry,
      v8: { v8Flags: ["--trace-opt", "--trace-deopt"], onOutput },
    },
    HEADERS,
  );
  if (!worker) throw new Error(`${label}: ${skipped}`);
  await runWrk(`${worker.url}/`, { durationS: Number(values.warmup), headers: HEADERS });
  const rows = [];
  for (let burst = 1; burst <= bursts; burst++) {
    await sleep(Number(values.idle) * 1000);
    lines = [];
    const run = await runWrk(`${worker.url}/`, {
      durationS: Number(values.seconds),
      headers: HEADERS,
      pids: { workerd: worker.pid },
    });
    const counted = tally(lines);
    rows.push({ burst, requests: run.requests, usPerRequest: run.cpu.workerd.usPerRequest, ...counted });
    console.error(
      `${label}, burst ${burst}: ${counted.deopts} deopts, ${counted.compiles} compiles, ${fmt(counted.compileMs, 1)} ms compiling`,
    );
  }
  await worker.stop();
  return rows;
}

try {
  const redis = await startRedis();
  const rest = await startRest(redis.url);
  const origin = await startOrigin();
  const stack = { rest, origin };
  const targets = [{ label: "this checkout", entry: "src/worker.ts" }];
  if (values.baseline) {
    const dir = extractBaseline(values.baseline);
    targets.push({ label: values.baseline, entry: `${dir}/src/worker.ts` });
  }
  const results = [];
  for (const target of targets)
    results.push({ ...target, rows: await measure(target.label, target.entry, stack) });
  const body = [];
  for (const { label, rows } of results) {
    for (const row of rows) {
      const top = [...row.deopted.entries()].sort((a, b) => b[1] - a[1]).slice(0, 4);
      body.push([
        label,
        String(row.burst),
        String(row.deopts),
        String(row.compiles),
        fmt(row.compileMs, 1),
        fmt((row.compileMs * 1000) / Math.max(1, row.requests), 1),
        top.map(([name, n]) => (n > 1 ? `${name} ×${n}` : name)).join("; ") || "–",
      ]);
    }
  }
  console.log(
    table(
      [
        "revision",
        "burst",
        "deopts",
        "compiles",
        "ms compiling",
        "µs compiling / request",
        "deoptimized (first four)",
      ],
      body,
    ),
  );
} finally {
  await stopAll();
}
