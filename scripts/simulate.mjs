#!/usr/bin/env node
// The simulator's long profile (docs/exactness.md): the same property as the fast one in `npm test`
// (test/node/simulation.test.ts), with longer scenarios, for N minutes, on a redis-server and REST server of
// its own (vitest's global setup). Prints runs, operations, operations/s and violations; exits non-zero on
// the first violation, with its shrunk scenario and the seed that replays it.
// Usage: npm run simulate -- --minutes N [--lanes L] [--mix kind:weight,…] [--seed S --path P]
//        npm run simulate -- --regions --minutes N [--lanes L] [--seed S --path P]   (regional databases:
//        test/node/simulation-regions.test.ts, each lane with a primary and three regions of its own)
//        npm run simulate -- --mutants [name,…] [--no-corpus]   (scripts/mutants.mjs)
import { spawn } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(`--${name}`);
  return at === -1 ? fallback : args[at + 1];
};
if (args.includes("--mutants")) {
  // The historical bugs put back, each against the fast profile (scripts/mutants.mjs).
  const rest = args.filter((a) => a !== "--mutants");
  const child = spawn(process.execPath, [resolve(root, "scripts/mutants.mjs"), ...rest], {
    stdio: "inherit",
  });
  child.on("exit", (code) => process.exit(code ?? 1));
} else {
  run();
}

function run() {
  const minutes = Number(option("minutes", "5"));
  if (!(minutes > 0)) {
    console.error("simulate: --minutes must be a positive number");
    process.exit(2);
  }
  const env = {
    ...process.env,
    SIM_MINUTES: String(minutes),
    SIM_LANES: option("lanes", process.env.SIM_LANES ?? "6"),
    WRANGLER_SEND_METRICS: "false",
  };
  const mix = option("mix");
  if (mix !== undefined) env.SIM_MIX = mix;
  const seed = option("seed");
  const path = option("path");
  if (seed !== undefined) env.SIM_SEED = seed;
  if (path !== undefined) env.SIM_PATH = path;

  const test = args.includes("--regions")
    ? "test/node/simulation-regions.test.ts"
    : "test/node/simulation.test.ts";
  if (args.includes("--regions") && option("lanes") === undefined) env.SIM_LANES = "3";
  const child = spawn(resolve(root, "node_modules/.bin/vitest"), ["run", "--project", "node-alone", test], {
    cwd: root,
    env,
    stdio: "inherit",
  });
  child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
}
