#!/usr/bin/env node
/**
 * Part 3, a picture of each algorithm: the same bursty traffic, replayed in real time against real Redis
 * through the engine's store (`createStore`, one EVALSHA per decision, Redis's clock), once per
 * algorithm at the same moments, then drawn as admitted vs offered requests per second (docs/*.svg).
 *
 * Every algorithm gets the same rule: 50 requests per 5 s (burst = limit, the default), so the long-run
 * rate is 10 req/s. The run starts on a 5 s boundary of Redis's clock, so fixed windows line up with the
 * chart's dotted lines.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "esbuild";
import { restCommand, startRedis, startRest } from "../lib/stack.mjs";
import { renderChart } from "./svg.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));

export const ALGORITHMS = [
  { algorithm: "fixed-window", title: "Fixed window", color: "#2563eb" },
  { algorithm: "sliding-window", title: "Sliding window (weighted two counters)", color: "#7c3aed" },
  { algorithm: "sliding-log", title: "Sliding log (exact)", color: "#059669" },
  { algorithm: "token-bucket", title: "Token bucket", color: "#d97706" },
  { algorithm: "gcra", title: "GCRA", color: "#dc2626" },
];

const LIMIT = 50;
const PERIOD_MS = 5_000;
const TICK_MS = 100;
const BIN_MS = 500;
/** The offered load: [from s, to s, requests per second]. Bursts straddle window boundaries on purpose. */
export const PATTERN = [
  [0, 4, 5],
  [4, 6, 40],
  [6, 10, 0],
  [10, 20, 15],
  [20, 23, 3],
  [23, 25, 60],
  [25, 30, 10],
];
export const DURATION_S = PATTERN.at(-1)[1];

/** Requests offered up to `t` seconds (the integral of the pattern's rate). */
export function offeredUpTo(t) {
  let total = 0;
  for (const [from, to, rate] of PATTERN) total += Math.max(0, Math.min(t, to) - from) * rate;
  return total;
}

/** The engine's store, bundled for Node (Lua as text, as the Worker's build does). */
export async function loadStore() {
  const outfile = join(tmpdir(), `floodgate-chart-store-${process.pid}.mjs`);
  await build({
    entryPoints: [join(root, "src/engine/store.ts")],
    outfile,
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node22",
    loader: { ".lua": "text" },
    logLevel: "silent",
  });
  return import(pathToFileURL(outfile).href);
}

/** Replays PATTERN against every algorithm at once; returns per-algorithm request logs. */
async function replay(store, prefix) {
  const identityHash = `chart-${Date.now().toString(36)}`;
  const callFor = (algorithm) => ({
    rule: `chart-${algorithm}`,
    algorithm,
    limit: LIMIT,
    periodMs: PERIOD_MS,
    burst: LIMIT,
    cost: 1,
    mode: "on",
    failure: "closed",
    identityHash,
  });
  const logs = Object.fromEntries(ALGORITHMS.map(({ algorithm }) => [algorithm, []]));
  const pending = [];
  const startedAt = Date.now();
  let sequence = 0;
  for (let tick = 0; tick * TICK_MS < DURATION_S * 1000; tick++) {
    const fromS = (tick * TICK_MS) / 1000;
    const toS = ((tick + 1) * TICK_MS) / 1000;
    const count = Math.floor(offeredUpTo(toS) + 1e-9) - Math.floor(offeredUpTo(fromS) + 1e-9);
    for (let i = 0; i < count; i++) {
      for (const { algorithm } of ALGORITHMS) {
        const requestId = `${prefix}-${sequence++}`;
        pending.push(
          store.decide([callFor(algorithm)], requestId).then(
            (decision) => logs[algorithm].push({ atS: fromS, allowed: decision.allowed }),
            (error) =>
              logs[algorithm].push({ atS: fromS, allowed: false, error: error.kind ?? error.message }),
          ),
        );
      }
    }
    const nextAt = startedAt + (tick + 1) * TICK_MS;
    await sleep(Math.max(0, nextAt - Date.now()));
  }
  await Promise.all(pending);
  return logs;
}

/** Per-bin requests per second. */
function perSecond(entries) {
  const bins = new Array(Math.ceil((DURATION_S * 1000) / BIN_MS)).fill(0);
  for (const { atS } of entries) bins[Math.floor((atS * 1000) / BIN_MS)] += 1000 / BIN_MS;
  return bins;
}

/** Runs the charts part: writes docs/chart-<algorithm>.svg; returns `{ markdown, json }`. */
export async function runCharts({ log = console.error } = {}) {
  const { createStore } = await loadStore();
  const redis = await startRedis();
  const rest = await startRest(redis.url);
  try {
    const prefix = `chart${Date.now().toString(36)}`;
    const store = createStore({ url: rest.url, token: rest.token, prefix, timeoutMs: 1_000 });
    // Start on a window boundary of Redis's clock (the script's time source).
    const [seconds, micros] = (await restCommand(rest, ["TIME"])).map(Number);
    await sleep(PERIOD_MS - ((seconds * 1000 + Math.floor(micros / 1000)) % PERIOD_MS));
    log(`charts: replaying ${DURATION_S} s of traffic against ${ALGORITHMS.length} algorithms…`);
    const logs = await replay(store, prefix);
    mkdirSync(join(root, "docs"), { recursive: true });
    const summary = [];
    for (const { algorithm, title, color } of ALGORITHMS) {
      const entries = logs[algorithm];
      const admitted = entries.filter((e) => e.allowed);
      const errors = entries.filter((e) => e.error).length;
      const svg = renderChart({
        title,
        subtitle: `limit ${LIMIT} per ${PERIOD_MS / 1000} s${/token|gcra/.test(algorithm) ? `, burst ${LIMIT}` : ""} · admitted ${admitted.length} of ${entries.length} offered${errors ? ` · ${errors} errors` : ""} · real run on Redis`,
        binMs: BIN_MS,
        offered: perSecond(entries),
        admitted: perSecond(admitted),
        averageRate: (LIMIT * 1000) / PERIOD_MS,
        windowMs: PERIOD_MS,
        color,
      });
      writeFileSync(join(root, `docs/chart-${algorithm}.svg`), svg);
      summary.push({ algorithm, offered: entries.length, admitted: admitted.length, errors });
    }
    const markdown = [
      `Same traffic for every algorithm (${DURATION_S} s, bursts of 40 and 60 req/s, an overload of 15 req/s), rule: ${LIMIT} per ${PERIOD_MS / 1000} s.`,
      "",
      "| algorithm | offered | admitted | errors | chart |",
      "| --- | --- | --- | --- | --- |",
      ...summary.map(
        (s) =>
          `| ${s.algorithm} | ${s.offered} | ${s.admitted} | ${s.errors} | [docs/chart-${s.algorithm}.svg](../../docs/chart-${s.algorithm}.svg) |`,
      ),
    ].join("\n");
    return {
      markdown,
      json: { limit: LIMIT, periodMs: PERIOD_MS, binMs: BIN_MS, pattern: PATTERN, summary },
    };
  } finally {
    await Promise.all([rest.stop(), redis.stop()]);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const { markdown } = await runCharts();
  console.log(markdown);
}
