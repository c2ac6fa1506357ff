#!/usr/bin/env node
/**
 * What the lease layer (src/leases) costs a never-seen identity, in workerd CPU, with nothing else in the
 * measured stretch: one Worker decides N requests, each of a new identity, through a `LeasingDecider` over a decider
 * that answers at once (no Redis, no network), and the same N through that decider alone; workerd's CPU over
 * each batch (/proc) divided by N. The difference is what leases add to a cold request: its whole cost, since a
 * cold request with leases on makes the same one Redis call as with leases off. First past the lease table's
 * capacity (10,000 pairs), so every new identity is an eviction, as under a steady stream of new clients.
 * `--baseline REV` measures another revision's lease layer in the same rounds.
 *
 *   node bench/lease-cold.mjs [--baseline main] [--rounds 6] [--iterations 20000]
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { extractBaseline } from "./lib/baseline.mjs";
import { cpuSeconds, stopAll } from "./lib/procs.mjs";
import { fmt, median, table } from "./lib/report.mjs";
import { startWorker } from "./lib/workerd.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));

/** The Worker: `?app=<name>&n=<N>` decides N never-seen identities through that decider. */
function workerSource(revisions) {
  const imports = revisions
    .map(
      ({ name, from }) =>
        `import { LeasingDecider as ${name}Leases } from ${JSON.stringify(`${from}/leases`)};\nimport { decisionOf as ${name}DecisionOf, ruleResult as ${name}RuleResult } from ${JSON.stringify(`${from}/engine/results`)};`,
    )
    .join("\n");
  return `${imports}

/** A decider answering every call "allowed" at once, as Redis would for a new identity. */
function answering(decisionOf, ruleResult) {
  const answer = (calls) =>
    decisionOf(
      true,
      calls.map((call) =>
        ruleResult({ call, outcome: "allowed", limit: call.limit, periodMs: call.periodMs, remaining: call.limit - 1,
          resetAfterMs: 1000, retryAfterMs: 0, source: "redis" })),
      1,
    );
  return {
    decide: async (calls) => answer(calls),
    release: async () => undefined,
    health: () => ({}),
    forget: () => undefined,
    cachedDenial: () => undefined,
    cachedFigures: () => undefined,
  };
}

const deciders = {
${revisions
  .map(
    ({ name }) =>
      `  ${name}Plain: answering(${name}DecisionOf, ${name}RuleResult),\n  ${name}: new ${name}Leases(answering(${name}DecisionOf, ${name}RuleResult), { maxMs: 1000, refund: async () => [0] }),`,
  )
  .join("\n")}
};
let seen = 0;
const waitUntil = () => undefined;

export default {
  async fetch(request) {
    const url = new URL(request.url);
    const decider = deciders[url.searchParams.get("app") ?? ""];
    if (!decider) return new Response("ready");
    const n = Number(url.searchParams.get("n") ?? 1000);
    for (let i = 0; i < n; i++) {
      // A new identity hash each time, shaped as the engine's (22 base64url characters).
      const identityHash = (++seen).toString(36).padStart(22, "A");
      const calls = [{ rule: "cold", algorithm: "sliding-window", limit: 100, periodMs: 60_000, burst: 100,
        cost: 1, mode: "on", failure: "open", identityHash, override: false }];
      const now = decider.decideNow?.(calls, "-", waitUntil);
      if (!now) await decider.decide(calls, "-", { budgetMs: 200, waitUntil });
    }
    return Response.json({ n });
  },
};
`;
}

const { values } = parseArgs({
  options: {
    baseline: { type: "string" },
    rounds: { type: "string", default: "6" },
    iterations: { type: "string", default: "20000" },
  },
});
const rounds = Number(values.rounds);
const iterations = Number(values.iterations);

mkdirSync(`${root}bench/.baseline`, { recursive: true });
const revisions = [{ name: "current", label: "this checkout", from: "../../src" }];
if (values.baseline) {
  const extracted = basename(extractBaseline(values.baseline));
  revisions.push({ name: "baseline", label: values.baseline, from: `./${extracted}/src` });
}
const entry = "bench/.baseline/lease-cold.mjs";
writeFileSync(`${root}${entry}`, workerSource(revisions));

try {
  const worker = await startWorker("lease-cold", entry, {});
  const apps = revisions.flatMap(({ name }) => [`${name}Plain`, name]);
  const batch = async (app, n) => {
    const before = cpuSeconds(worker.pid);
    await (await fetch(`${worker.url}/?app=${app}&n=${n}`)).arrayBuffer();
    return ((cpuSeconds(worker.pid) - before) * 1e6) / n;
  };
  for (const app of apps) await batch(app, 12_000); // compiled, and every table past its capacity
  const us = Object.fromEntries(apps.map((app) => [app, []]));
  for (let round = 1; round <= rounds; round++) {
    for (const app of round % 2 ? apps : [...apps].reverse()) us[app].push(await batch(app, iterations));
    console.error(`round ${round}: ${apps.map((app) => `${app} ${fmt(us[app].at(-1), 2)} µs`).join(", ")}`);
  }
  console.log(
    table(
      [
        "lease layer",
        "µs per cold decision, with leases (median)",
        "without",
        "leases add, µs (median of rounds)",
      ],
      revisions.map(({ name, label }) => [
        label,
        fmt(median(us[name]), 2),
        fmt(median(us[`${name}Plain`]), 2),
        fmt(median(us[name].map((x, i) => x - us[`${name}Plain`][i])), 2),
      ]),
    ),
  );
} finally {
  await stopAll();
}
