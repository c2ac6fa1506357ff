/**
 * Path matching, side by side in one run: this checkout's linear matcher (src/rules/pattern.ts) against a
 * baseline revision's (by default the last one with the backtracking regex: `*` → `.*`, `:name` → `[^/]+`).
 * Part 1: ns per match on ordinary patterns and paths, the pattern alone and a rule's whole match as the
 * limiter asks it (src/rules/match.ts: canonical path, path as sent, without a trailing slash); rounds
 * interleaved (baseline, now, baseline, now, …) so drift hits both; the median round is reported. Part 2: the
 * attacks' paths, one timed call each (the regex takes about a minute on them in all; `--skip-old` skips it).
 *
 *   node bench/path-match.mjs [--baseline 4852d23] [--rounds 15] [--iterations 200000] [--skip-old]
 */
import { rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { extractBaseline } from "./lib/baseline.mjs";
import { fmt, median, table } from "./lib/report.mjs";

const { values: args } = parseArgs({
  options: {
    baseline: { type: "string", default: "4852d23" }, // the last revision matching paths with a regex
    rounds: { type: "string", default: "15" },
    iterations: { type: "string", default: "200000" },
    "skip-old": { type: "boolean", default: false },
  },
});
const rounds = Number(args.rounds);
const iterations = Number(args.iterations);

/** The matching code of the checkout at `dir`, bundled (TypeScript and all) and imported. */
async function matchingOf(dir) {
  const bundle = await build({
    stdin: {
      contents: `export { compilePath, compileRules } from "./src/rules/match.ts";
export { parseRules } from "./src/config/rules.ts";
export * from "./src/identity/request.ts";`,
      resolveDir: dir,
      loader: "ts",
    },
    bundle: true,
    format: "esm",
    platform: "neutral",
    mainFields: ["module", "main"],
    write: false,
    logLevel: "silent",
  });
  return import(`data:text/javascript;base64,${Buffer.from(bundle.outputFiles[0].text).toString("base64")}`);
}

const now = await matchingOf(join(dirname(fileURLToPath(import.meta.url)), ".."));
const baselineDir = extractBaseline(args.baseline);
const before = await matchingOf(baselineDir);
rmSync(baselineDir, { recursive: true, force: true }); // bundled in memory; a stale copy would only mislead greps and tests

/** Ordinary rules and the paths requests bring: some match, most do not. */
const PATTERNS = [
  "/login",
  "/api/*",
  "/users/:id",
  "/users/:id/posts/:post",
  "/v1/*/items/:id.json",
  "/static/*.css",
  "/api/v2/organizations/:org/projects/:project/deployments/*",
];
const PATHS = [
  "/login",
  "/",
  "/api/v1/items/42",
  "/users/8f2c1e",
  "/users/8f2c1e/posts/17",
  "/v1/shop/items/991.json",
  "/static/app.3f9a.css",
  "/api/v2/organizations/acme/projects/web/deployments/2026-11-28/logs",
  "/images/2026/11/28/holiday-photo-0193.jpeg",
  "/search",
];

/** ns per call of `test(i, j)` (pattern i on path j) over every pattern and path, one round. */
function round(test) {
  let hits = 0;
  const start = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) {
    const j = i % PATHS.length;
    for (let p = 0; p < PATTERNS.length; p++) if (test(p, j)) hits++;
  }
  return { ns: Number(process.hrtime.bigint() - start) / (iterations * PATTERNS.length), hits };
}

/** One version's two ways to ask: its path matcher alone, and its rules' whole match. */
function contenders(version) {
  const paths = PATTERNS.map((p) => version.compilePath(p));
  const rules = version.compileRules(
    version.parseRules(
      PATTERNS.map((path, i) => ({
        name: `r${i}`,
        match: { path },
        key: "ip",
        algorithm: "fixed-window",
        limit: 1,
        period: "1m",
      })),
      { label: "rules", jwtVerifiable: false },
    ),
  );
  // One request object per path, its canonical path computed once, as the limiter does per request.
  // `RequestFacts`, named `RequestIdentity` in revisions before it (a baseline may be one).
  const Facts = version.RequestFacts ?? version.RequestIdentity;
  const targets = PATHS.map(
    (path) => new Facts(new Request(`https://edge.test${path}`), { clientIpHeader: "x" }),
  );
  for (const target of targets) void target.path;
  return {
    pattern: (p, j) => paths[p].test(PATHS[j]),
    rule: (p, j) => rules[p].matches("GET", targets[j]),
  };
}

const sides = { before: contenders(before), now: contenders(now) };
const times = { "pattern before": [], "pattern now": [], "rule before": [], "rule now": [] };
const ratios = { pattern: [], rule: [] };
for (let r = 0; r < rounds; r++) {
  for (const kind of ["pattern", "rule"]) {
    // before, now in even rounds; now, before in odd ones: whatever the order costs falls on both alike.
    const order = r % 2 === 0 ? ["before", "now"] : ["now", "before"];
    const [first, second] = order.map((side) => round(sides[side][kind]));
    const a = r % 2 === 0 ? first : second;
    const b = r % 2 === 0 ? second : first;
    if (a.hits !== b.hits) throw new Error(`${kind}: the matchers disagree: ${a.hits} vs ${b.hits} hits`);
    times[`${kind} before`].push(a.ns);
    times[`${kind} now`].push(b.ns);
    ratios[kind].push(b.ns / a.ns);
  }
}
console.log(
  `Part 1: ns per match, ${PATTERNS.length} patterns × ${PATHS.length} ordinary paths, ${rounds} interleaved rounds of ${iterations} requests (before = ${args.baseline})\n`,
);
const summary = ([label, ns]) => [
  label,
  fmt(median(ns), 1),
  fmt(Math.min(...ns), 1),
  fmt(Math.max(...ns), 1),
  label.endsWith("now") ? `${fmt(median(ratios[label.split(" ")[0]]), 2)}×` : "",
];
console.log(
  table(
    ["matcher", "ns / match (median)", "min", "max", "now / before (median of the rounds' ratios)"],
    Object.entries(times).map(summary),
  ),
);

/** The attacks, each as the tests replay it (test/node/path-match.test.ts). */
const ATTACKS = [
  ["/v/:a.:b.:c", `/v/${".".repeat(3_000)}/`, "3,000 dots and a /"],
  ["/f/:a-:b-:c", `/f/${"-".repeat(3_000)}/`, "3 KB of -, and a /"],
  ["/a/*/*/*/z", `/a/${"x/".repeat(2_000)}y`, "a 4 KB path"],
  ["/v/:a.:b.:c", `/v/${".".repeat(16_384)}/`, "16 KB of dots and a /"],
  ["/a/*/*/*/*/*/z", `/a/${"/".repeat(16_384)}`, "16 KB of /"],
];
const once = (matcher, path) => {
  const start = performance.now();
  matcher.test(path);
  return performance.now() - start;
};
const rows = [];
for (const [pattern, path, what] of ATTACKS) {
  const linearMs = median([1, 2, 3, 4, 5].map(() => once(now.compilePath(pattern), path)));
  const small = path.length <= 4_100;
  const oldMs = args["skip-old"] || !small ? undefined : once(before.compilePath(pattern), path);
  rows.push([
    `${pattern} on ${what}`,
    oldMs === undefined ? (small ? "(skipped)" : "(minutes or more: not run)") : fmt(oldMs, 0),
    fmt(linearMs, 3),
  ]);
}
console.log("\nPart 2: the attacks' paths, ms for one match (linear: median of 5)\n");
console.log(table(["pattern on path", "before, ms", "now, ms"], rows));
