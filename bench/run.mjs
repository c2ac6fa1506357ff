#!/usr/bin/env node
/**
 * `npm run bench`: the whole benchmark suite, or some parts of it, then bench/results/latest.md.
 *
 *   node bench/run.mjs                          every part: redis, overhead, exactness, charts
 *   node bench/run.mjs --only overhead,charts   just those parts (the others' last results are kept)
 *   node bench/run.mjs --quick                  shorter runs (2 s × 1 repetition) to try the harness
 *   node bench/run.mjs --assemble               run nothing, only rebuild latest.md from the parts' results
 *   node bench/run.mjs --baseline <rev>         overhead also measures <rev>'s Floodgate, in the same rounds
 *   node bench/run.mjs --repetitions 6           more interleaved overhead rounds (default 3): steadier medians
 *
 * Each part writes bench/results/<part>.md and <part>.json; latest.md is assembled from every part's last
 * result, under a description of the machine. Never part of `npm test`: it saturates both cores.
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { runCharts } from "./charts/run.mjs";
import { runExactness } from "./exactness.mjs";
import { stopAll } from "./lib/procs.mjs";
import { machine } from "./lib/report.mjs";
import { runOverhead } from "./overhead.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const results = `${root}bench/results/`;

/** The Redis-level bench is the engine engineer's (bench/redis/); it prints a markdown table. */
function runRedisBench({ quick }) {
  const entry = ["run.mjs", "index.mjs", "bench.mjs"]
    .map((name) => `${root}bench/redis/${name}`)
    .find((path) => existsSync(path));
  if (!entry)
    return Promise.resolve({ markdown: "Not run: bench/redis/ has no entry script yet.", json: null });
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [entry, ...(quick ? ["--quick"] : [])], {
      stdio: ["ignore", "pipe", "inherit"],
      cwd: root,
    });
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
    });
    child.on("error", reject);
    child.on("exit", (code) =>
      code === 0
        ? resolve({ markdown: out.trim(), json: null })
        : reject(new Error(`bench/redis exited with ${code}`)),
    );
  });
}

const PARTS = {
  redis: { title: "Redis: the Lua script alone", run: ({ quick }) => runRedisBench({ quick }) },
  overhead: {
    title: "Overhead under `workerd serve`",
    run: ({ quick, baseline, repetitions }) =>
      runOverhead({
        ...(quick ? { durationS: 2, repetitions: 1, warmupS: 1 } : {}),
        ...(repetitions ? { repetitions: Number(repetitions) } : {}),
        baseline,
      }),
  },
  exactness: {
    title: "Exactness across instances",
    run: ({ quick }) => runExactness(quick ? { limit: 100 } : {}),
  },
  charts: { title: "How each algorithm shapes the same bursty traffic", run: () => runCharts() },
};

const { values } = parseArgs({
  options: {
    only: { type: "string" },
    quick: { type: "boolean", default: false },
    assemble: { type: "boolean", default: false },
    baseline: { type: "string" },
    repetitions: { type: "string" },
  },
});
const selected = values.assemble
  ? []
  : values.only
    ? values.only.split(",").map((part) => part.trim())
    : Object.keys(PARTS);
for (const part of selected) {
  if (!PARTS[part]) {
    console.error(`unknown part "${part}"; choose from: ${Object.keys(PARTS).join(", ")}`);
    process.exit(2);
  }
}

// What npm cannot bring (Node ≥ 22 check, redis-server); wrk is installed by the overhead part itself.
const setup = spawnSync(process.execPath, [`${root}scripts/setup.mjs`], { stdio: "inherit" });
if (setup.status !== 0) process.exit(setup.status ?? 1);

mkdirSync(results, { recursive: true });
// What was measured: the working tree is bundled as it is, uncommitted changes included.
const git = (...args) => spawnSync("git", args, { cwd: root, encoding: "utf8" }).stdout?.trim() ?? "";
const revision = `commit ${git("rev-parse", "--short", "HEAD") || "unknown"}${git("status", "--porcelain", "--", "src", "lua") ? " + uncommitted changes in src/ or lua/" : ""}`;
let failed = false;
for (const part of selected) {
  console.error(`\n== ${part} ==`);
  const startedAt = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  try {
    const { markdown, json } = await PARTS[part].run({
      quick: values.quick,
      baseline: values.baseline,
      repetitions: values.repetitions,
    });
    const quickNote = values.quick ? " (`--quick`: shortened, not for comparison)" : "";
    writeFileSync(`${results}${part}.md`, `_Run ${startedAt} on ${revision}${quickNote}._\n\n${markdown}\n`);
    if (json) writeFileSync(`${results}${part}.json`, `${JSON.stringify({ startedAt, ...json }, null, 2)}\n`);
    console.log(markdown);
  } catch (error) {
    failed = true;
    console.error(`${part} failed: ${error.stack ?? error}`);
    // Say so in the table rather than keep showing an older result as if it were this run's.
    writeFileSync(
      `${results}${part}.md`,
      `_Run ${startedAt}: **failed**: ${String(error.message).split("\n")[0]}._\n`,
    );
    await stopAll();
  }
}

/** Results of bench/failure/ (the resilience engineer's, run on their own), shown when present. */
const SEPARATE = {
  failure: "Throughput while Redis fails (`node bench/failure/run.mjs`)",
  "failure-scenarios": "What a client sees in each failure (`node bench/failure/scenarios.mjs`)",
};
const titles = {
  ...Object.fromEntries(Object.entries(PARTS).map(([part, { title }]) => [part, title])),
  ...SEPARATE,
};
const sections = Object.entries(titles)
  .filter(([part]) => existsSync(`${results}${part}.md`))
  .map(([part, title]) => `## ${title}\n\n${readFileSync(`${results}${part}.md`, "utf8").trim()}`);
writeFileSync(
  `${results}latest.md`,
  `# Floodgate benchmarks (latest)\n\nGenerated by \`npm run bench\`. Machine:\n\n${machine()}\n\n${sections.join("\n\n")}\n`,
);
console.error(`\nwrote ${results}latest.md`);
process.exit(failed ? 1 : 0);
