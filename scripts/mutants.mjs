#!/usr/bin/env node
// Proof that the simulator can fail (docs/exactness.md, "Proof that it can fail"): each mutant puts one
// historical over-admission (or a planted bug in a mechanism with no such history) back into a scratch copy of
// this work tree (its tracked files as they are now, node_modules linked), runs the fast profile of `npm test`
// there (test/node/simulation.test.ts, the corpus and the random scenarios) and tells whether it reported a
// violation, and which. This tree is never changed.
// Usage: npm run simulate -- --mutants [name,…] [--no-corpus]   (or: node scripts/mutants.mjs [name,…])
import { spawn, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/**
 * The bugs put back: each an exact text of today's code and what it was before the fix (the commit named).
 * A text not found exactly once stops the run: the code moved, and the mutant must follow it.
 */
const MUTANTS = [
  {
    name: "lease-edge",
    fixedBy: "b4bfc0d",
    what: "a short lease spend needs only a lease live now, not one that outlives the decision's budget and grace",
    file: "src/leases/index.ts",
    from: "const answeredBy = budget.budgetMs === undefined ? undefined : at + budget.budgetMs + GUARD_MS;",
    to: "const answeredBy = budget.budgetMs === undefined ? undefined : at;",
  },
  {
    name: "split-refund-tat",
    fixedBy: "f8a8578",
    what: "a split decision's refund to a token bucket gives back all of its units' time, not what is still ahead of now",
    file: "lua/refund.lua",
    from: "owed_us = math.min(owed_us, stamp_us - now_us - since_us)",
    to: "owed_us = owed_us -- (uncapped)",
  },
  {
    name: "fallback-share",
    fixedBy: "87fb3b6",
    what: "while Redis is slow, each isolate's fallback limiter lets the whole limit through again, not 10 % of it",
    file: "src/resilience/fallback.ts",
    from: "export const FALLBACK_SHARE = 0.1;",
    to: "export const FALLBACK_SHARE = 1;",
  },
  {
    name: "region-drop-mark",
    fixedBy: "4cb0786",
    what: "a grant asked for before an admin change dropped a region's pools is deposited all the same",
    file: "lua/region-deposit.lua",
    from: "if asked_ms <= dropped_ms + 1 then",
    to: "if false then",
    // The regional simulation's fast profile (test/sim/regions.ts).
    test: "test/node/simulation-regions.test.ts",
  },
  {
    name: "region-revoked-guard",
    fixedBy: "ef8ec9a",
    what: "an isolate deposits a grant it sent to the primary before an admin change it has heard of",
    file: "src/regions/decider.ts",
    from: "if (at <= (this.#revokedAt.get(revocationKey(r.call.rule, r.call.identityHash)) ?? -1)) return [];",
    to: "// (deposited whatever the isolate has heard of)",
    test: "test/node/simulation-regions.test.ts",
  },
  // Planted, not historical: each breaks a mechanism the corpus now meets every run (test/sim/corpus.ts).
  {
    name: "count-every-status",
    what: "a rule counting by status gives back the units of every response, the statuses it counts too",
    file: "src/middleware/count.ts",
    from: "const back = held.filter((r) => !counts.get(r.call.rule)?.counts(status));",
    to: "const back = held.filter((r) => counts.has(r.call.rule));",
  },
  {
    name: "block-unwritten",
    what: "a denial by a rule with a `block` says it started one but never writes the block's key",
    file: "lua/decide/rules.lua",
    from: 'redis.call("SET", block_key, "1", "PX", block_ms)',
    to: "-- (the block's key is not written)",
  },
  {
    name: "shed-one-more",
    what: "a shed rule lets each priority class one request past its share of a sub-key",
    file: "src/middleware/shed.ts",
    from: "Math.floor(subCapacity * share + 1e-9);",
    to: "Math.floor(subCapacity * share + 1e-9) + 1;",
  },
  {
    name: "list-removal-ignored",
    what: "an isolate applying a live list's change log skips the addresses removed: a client taken off a deny list stays refused",
    file: "src/live/lists.ts",
    from: 'if ("removed" in edit) held.addresses.delete(prefix);',
    to: 'if ("removed" in edit) continue;',
  },
];

const args = process.argv.slice(2);
const names = args.find((a) => !a.startsWith("--"))?.split(",");
const corpus = !args.includes("--no-corpus");
const chosen = names ? MUTANTS.filter((m) => names.includes(m.name)) : MUTANTS;
if (chosen.length === 0) {
  console.error(`mutants: none of ${names} (known: ${MUTANTS.map((m) => m.name).join(", ")})`);
  process.exit(2);
}

/** A copy of the work tree's tracked files as they are now, with node_modules linked, under a temp dir. */
function scratchCopy() {
  const dir = mkdtempSync(join(tmpdir(), "floodgate-mutant-"));
  const listed = spawnSync("git", ["ls-files", "-z"], { cwd: root, encoding: "utf8" });
  if (listed.status !== 0) throw new Error(`git ls-files: ${listed.stderr}`);
  for (const file of listed.stdout.split("\0").filter(Boolean)) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    try {
      cpSync(join(root, file), join(dir, file));
    } catch {
      // deleted in the work tree, not yet committed: left out
    }
  }
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
  return dir;
}

function mutate(dir, m) {
  const path = join(dir, m.file);
  const text = readFileSync(path, "utf8");
  const found = text.split(m.from).length - 1;
  if (found !== 1) throw new Error(`${m.name}: "${m.from}" found ${found} times in ${m.file}, not once`);
  writeFileSync(path, text.replace(m.from, m.to));
}

/** Runs the fast profile of `test` in `dir`; resolves to its exit code, its output and its seconds. */
function fastProfile(dir, test = "test/node/simulation.test.ts") {
  const started = Date.now();
  const env = {
    ...process.env,
    PATH: `${join(root, "node_modules/.bin")}:${process.env.PATH}`,
    WRANGLER_SEND_METRICS: "false",
    NO_COLOR: "1",
    SIM_CORPUS: corpus ? "1" : "0",
  };
  for (const k of ["SIM_MINUTES", "SIM_SEED", "SIM_PATH", "SIM_RUNS"]) delete env[k];
  return new Promise((done) => {
    const child = spawn("vitest", ["run", "--project", "node-alone", test], {
      cwd: dir,
      env,
    });
    let output = "";
    child.stdout.on("data", (d) => {
      output += d;
    });
    child.stderr.on("data", (d) => {
      output += d;
    });
    child.on("exit", (code) => done({ code, output, seconds: (Date.now() - started) / 1000 }));
  });
}

let missed = 0;
for (const m of chosen) {
  const dir = scratchCopy();
  try {
    mutate(dir, m);
    const origin = m.fixedBy ? `${m.fixedBy} reverted` : "planted";
    console.log(`mutant ${m.name} (${origin}: ${m.what}): running the fast profile…`);
    const { code, output, seconds } = await fastProfile(dir, m.test);
    // Printed as soon as found (test/sim/profile.ts), before shrinking: the violation and how to replay it.
    const found = /simulation: violation found \((.*?)\); replay: ([^;]*);/.exec(output);
    if (code !== 0 && found) {
      console.log(`  caught in ${seconds.toFixed(0)} s: ${found[1]}\n  replay: ${found[2]}`);
    } else {
      missed++;
      console.log(
        `  NOT caught (exit ${code}, ${seconds.toFixed(0)} s)${code !== 0 ? `:\n${output.slice(-3000)}` : ""}`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
console.log(
  `mutants: ${chosen.length - missed} of ${chosen.length} caught by the fast profile${corpus ? "" : " without the corpus"}`,
);
process.exit(missed === 0 ? 0 : 1);
