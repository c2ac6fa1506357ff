#!/usr/bin/env node
/**
 * The limiter's own CPU per leased decision, inside workerd, with no network in the way: one Worker runs a
 * Hono app N times within one request (its handler answers `ok`), plain and behind `rateLimit()` (one
 * sliding-window rule, one hot identity: after its first lease every decision is local), and workerd's CPU
 * over each batch (/proc) is divided by N. No origin, load generator or Redis call shares the measured
 * stretch, so rounds agree within a few %, where the proxied benchmarks swing ±15 %: the tool for weighing a
 * change to the leased path. `--baseline REV` puts another revision's middleware in the same Worker, measured
 * in the same rounds. It measures the middleware package's path (src/middleware/index.ts), which the Worker's
 * shares but for its live modes and the proxy.
 *
 *   node bench/limiter-loop.mjs [--baseline main] [--rounds 6] [--iterations 20000]
 *
 * `--cold`: instead, a never-seen identity per decision (every one a Redis call, awaited one after the other),
 * each middleware with leases on and off (`leases: "off"`): what leases cost cold traffic in workerd CPU. The
 * Redis call is in the measured stretch, the same for both; the difference is the lease layer's.
 *
 *   node bench/limiter-loop.mjs --cold [--baseline main] [--rounds 6] [--iterations 2000]
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { extractBaseline } from "./lib/baseline.mjs";
import { cpuSeconds, stopAll } from "./lib/procs.mjs";
import { fmt, median, table } from "./lib/report.mjs";
import { startRedis, startRest } from "./lib/stack.mjs";
import { startWorker } from "./lib/workerd.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));

/** The Worker: `?app=<name>&n=<N>` runs that app N times and says how many answers came from a lease. */
function workerSource(middlewares, cold) {
  const imports = middlewares
    .map(({ name, from }) => `import { rateLimit as ${name} } from ${JSON.stringify(from)};`)
    .join("\n");
  return `import { Hono } from "hono";
${imports}

const rules = [{ name: "loop", key: "ip", algorithm: "sliding-window", limit: 1_000_000_000, period: "1h" }];
let apps;
let seen = 0; // identities used so far (--cold: a new one per decision)
function build(env) {
  const redis = { url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN };
  const plain = new Hono();
  plain.get("*", (c) => c.text("ok"));
  const built = { plain };
  for (const [name, rateLimit] of Object.entries({ ${middlewares.map((m) => m.name).join(", ")} })) {
    for (const leases of ${cold ? '["on", "off"]' : '["on"]'}) {
      const app = new Hono();
      // Leases as long as allowed: none expires within a batch (the isolate's clock stands still in one).
      const prefix = \`loop-\${name}-\${leases}-\${Date.now()}\`;
      app.use("*", rateLimit({ redis, prefix, leaseMs: 10_000, leases, rules }));
      app.get("*", (c) => c.text("ok"));
      built[leases === "on" ? name : \`\${name}-off\`] = app;
    }
  }
  return built;
}

export default {
  async fetch(request, env, ctx) {
    apps ??= build(env);
    const url = new URL(request.url);
    const app = apps[url.searchParams.get("app") ?? ""];
    if (!app) return new Response("ready");
    const n = Number(url.searchParams.get("n") ?? 1000);
    let leased = 0;
    for (let i = 0; i < n; i++) {
      const ip = ${cold ? '["10", (++seen >> 16) & 255, (seen >> 8) & 255, seen & 255].join(".")' : '"203.0.113.7"'};
      const init = { headers: { "CF-Connecting-IP": ip } };
      const response = await app.fetch(new Request("http://loop.test/items?page=1", init), env, ctx);
      if (response.headers.get("Server-Timing")?.includes('desc="lease"')) leased++;
    }
    return Response.json({ n, leased });
  },
};
`;
}

const { values } = parseArgs({
  options: {
    baseline: { type: "string" },
    rounds: { type: "string", default: "6" },
    iterations: { type: "string" },
    cold: { type: "boolean", default: false },
  },
});
const rounds = Number(values.rounds);
const { cold } = values;
const iterations = Number(values.iterations ?? (cold ? 2000 : 20000));

const dir = `${root}bench/.baseline`;
mkdirSync(dir, { recursive: true });
const middlewares = [{ name: "current", label: "this checkout", from: "../../src/middleware" }];
if (values.baseline) {
  const extracted = basename(extractBaseline(values.baseline));
  middlewares.push({ name: "baseline", label: values.baseline, from: `./${extracted}/src/middleware` });
}
const entry = "bench/.baseline/limiter-loop.mjs";
writeFileSync(`${root}${entry}`, workerSource(middlewares, cold));

try {
  const redis = await startRedis();
  const rest = await startRest(redis.url);
  const worker = await startWorker("limiter-loop", entry, {
    UPSTASH_REDIS_REST_URL: rest.url,
    UPSTASH_REDIS_REST_TOKEN: rest.token,
  });
  const apps = ["plain", ...middlewares.flatMap((m) => (cold ? [m.name, `${m.name}-off`] : [m.name]))];
  const batch = async (app, n) => {
    const before = cpuSeconds(worker.pid);
    const { leased } = await (await fetch(`${worker.url}/?app=${app}&n=${n}`)).json();
    return { us: ((cpuSeconds(worker.pid) - before) * 1e6) / n, leased };
  };
  // Warm: compiled code, the first lease taken; --cold: past every per-isolate cache's capacity (10,000
  // identities), so that every identity after is an eviction, as under a steady stream of new clients.
  for (const app of apps) await batch(app, cold ? 12_000 : 3000);
  const us = Object.fromEntries(apps.map((app) => [app, []]));
  for (let round = 1; round <= rounds; round++) {
    for (const app of apps) {
      const { us: perIteration, leased } = await batch(app, iterations);
      if (!cold && app !== "plain" && leased < iterations * 0.99) {
        console.error(`limiter-loop: ${app}: only ${leased} of ${iterations} from leases`);
      }
      us[app].push(perIteration);
    }
    console.error(`round ${round}: ${apps.map((app) => `${app} ${fmt(us[app].at(-1), 1)} µs`).join(", ")}`);
  }
  const plain = median(us.plain);
  console.log(
    table(
      [
        "app",
        `workerd CPU µs per request (median)${cold ? ", a never-seen identity each" : ""}`,
        "rounds",
        "the limiter's share, µs",
      ],
      apps.map((app) => [
        app === "plain"
          ? "plain Hono app"
          : `rateLimit(), ${middlewares.find((m) => app.startsWith(m.name)).label}${cold ? (app.endsWith("-off") ? ", leases off" : ", leases on") : ""}`,
        fmt(median(us[app]), 1),
        us[app].map((x) => fmt(x, 1)).join(", "),
        app === "plain" ? "–" : fmt(median(us[app]) - plain, 1),
      ]),
    ),
  );
} finally {
  await stopAll();
}
