#!/usr/bin/env node
/**
 * Delay instead of deny, pictured: the charts' bursty traffic (bench/charts/run.mjs) replayed in real time
 * against real Redis through the engine's store, against one GCRA rule (the same 50 per 5 s, burst 50 as
 * docs/chart-gcra.svg) twice at the same moments: without a delay and with `delay = "3s"`. A request
 * leaves when the Worker would pass it on: at once, or after the wait the script returned. The chart bins
 * requests by the time they leave → docs/chart-delay.svg; the table compares the two rules.
 *
 *   node bench/charts/delay.mjs
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import { restCommand, startRedis, startRest } from "../lib/stack.mjs";
import { DURATION_S, loadStore, offeredUpTo } from "./run.mjs";
import { renderChart } from "./svg.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const LIMIT = 50;
const PERIOD_MS = 5_000;
const DELAY_MS = 3_000;
const TICK_MS = 100;
const BIN_MS = 500;

/** Replays the pattern against both rules; returns what happened to each request. */
async function replay(store) {
  const identityHash = `delay-${Date.now().toString(36)}`;
  const rule = (name, delayMs) => ({
    rule: name,
    algorithm: "gcra",
    limit: LIMIT,
    periodMs: PERIOD_MS,
    burst: LIMIT,
    cost: 1,
    delayMs,
    mode: "on",
    failure: "closed",
    identityHash,
  });
  const rules = { deny: rule("deny", 0), delay: rule("delay", DELAY_MS) };
  const logs = { deny: [], delay: [] };
  const pending = [];
  const startedAt = Date.now();
  for (let tick = 0; tick * TICK_MS < DURATION_S * 1000; tick++) {
    const fromS = (tick * TICK_MS) / 1000;
    const count =
      Math.floor(offeredUpTo(fromS + TICK_MS / 1000) + 1e-9) - Math.floor(offeredUpTo(fromS) + 1e-9);
    for (let i = 0; i < count; i++) {
      for (const name of ["deny", "delay"]) {
        pending.push(
          store.decide([rules[name]], "-").then(
            (d) => {
              const waitMs = d.results[0]?.delayMs ?? 0;
              logs[name].push({ atS: fromS, allowed: d.allowed, waitMs, leftS: fromS + waitMs / 1000 });
            },
            (error) => logs[name].push({ atS: fromS, allowed: false, waitMs: 0, error: error.kind }),
          ),
        );
      }
    }
    await sleep(Math.max(0, startedAt + (tick + 1) * TICK_MS - Date.now()));
  }
  await Promise.all(pending);
  return logs;
}

/** Per-bin requests per second of `times` (seconds); the chart runs `seconds` long. */
function perSecond(times, seconds) {
  const bins = new Array(Math.ceil((seconds * 1000) / BIN_MS)).fill(0);
  for (const t of times) {
    const bin = Math.floor((t * 1000) / BIN_MS);
    if (bin < bins.length) bins[bin] += 1000 / BIN_MS;
  }
  return bins;
}

/** Runs the replay, writes docs/chart-delay.svg, returns `{ markdown, json }`. */
export async function runDelayChart({ log = console.error } = {}) {
  const { createStore } = await loadStore();
  const redis = await startRedis();
  const rest = await startRest(redis.url);
  try {
    const store = createStore({ url: rest.url, token: rest.token, prefix: "delaychart", timeoutMs: 1_000 });
    const [seconds, micros] = (await restCommand(rest, ["TIME"])).map(Number);
    await sleep(PERIOD_MS - ((seconds * 1000 + Math.floor(micros / 1000)) % PERIOD_MS));
    log(`delay chart: replaying ${DURATION_S} s of traffic…`);
    const logs = await replay(store);
    const chartS = DURATION_S + DELAY_MS / 1000;
    const sum = (name) => {
      const entries = logs[name];
      const admitted = entries.filter((e) => e.allowed);
      const delayed = admitted.filter((e) => e.waitMs > 0);
      return {
        rule: name === "deny" ? "gcra, no delay" : `gcra, delay = "${DELAY_MS / 1000}s"`,
        offered: entries.length,
        admitted: admitted.length,
        delayed: delayed.length,
        denied: entries.length - admitted.length,
        maxWaitMs: Math.max(0, ...delayed.map((e) => e.waitMs)),
        meanWaitMs: delayed.length
          ? Math.round(delayed.reduce((a, e) => a + e.waitMs, 0) / delayed.length)
          : 0,
        errors: entries.filter((e) => e.error).length,
      };
    };
    const summary = [sum("deny"), sum("delay")];
    const delayedRun = summary[1];
    const admitted = logs.delay.filter((e) => e.allowed);
    const svg = renderChart({
      title: `GCRA with delay = "${DELAY_MS / 1000}s": requests held for their slot instead of denied`,
      subtitle: `limit ${LIMIT} per ${PERIOD_MS / 1000} s, burst ${LIMIT} · admitted ${delayedRun.admitted} of ${delayedRun.offered} (${delayedRun.delayed} delayed, up to ${delayedRun.maxWaitMs} ms) · denied ${delayedRun.denied} · binned by when they leave · real run on Redis`,
      binMs: BIN_MS,
      offered: perSecond(
        logs.delay.map((e) => e.atS),
        chartS,
      ),
      admitted: perSecond(
        admitted.map((e) => e.leftS),
        chartS,
      ),
      averageRate: (LIMIT * 1000) / PERIOD_MS,
      windowMs: PERIOD_MS,
      color: "#0891b2",
    });
    mkdirSync(join(root, "docs"), { recursive: true });
    writeFileSync(join(root, "docs/chart-delay.svg"), svg);
    const markdown = [
      `Same traffic as the charts (${DURATION_S} s), one GCRA rule of ${LIMIT} per ${PERIOD_MS / 1000} s (burst ${LIMIT}), with and without a delay; chart: [docs/chart-delay.svg](../../docs/chart-delay.svg).`,
      "",
      "| rule | offered | admitted | of which delayed | denied | longest wait | mean wait | errors |",
      "| --- | --- | --- | --- | --- | --- | --- | --- |",
      ...summary.map(
        (s) =>
          `| ${s.rule} | ${s.offered} | ${s.admitted} | ${s.delayed} | ${s.denied} | ${s.maxWaitMs} ms | ${s.meanWaitMs} ms | ${s.errors} |`,
      ),
    ].join("\n");
    return { markdown, json: { limit: LIMIT, periodMs: PERIOD_MS, delayMs: DELAY_MS, summary } };
  } finally {
    await Promise.all([rest.stop(), redis.stop()]);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const { markdown } = await runDelayChart();
  console.log(markdown);
}
