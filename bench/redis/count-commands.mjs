#!/usr/bin/env node
/**
 * What a rule counting by status costs on Upstash's bill, side by side with the same rule without `count`
 * (docs/counting.md, "What it costs"):
 *   node bench/redis/count-commands.mjs [--identities 200]
 * The real middleware (src/middleware, bundled with esbuild) on a local redis-server behind the local REST
 * server, for each window and bucket algorithm, one rule, `limit` far above use: billable commands per request
 * (every command in INFO commandstats, EVALSHA included, the give-back's refund call and its commands too) for
 *   plain         the rule without `count`, answered 200
 *   count, kept   `count = { status = ["401"] }`, answered 401: charged, nothing given back
 *   count, back   the same rule answered 200: its units given back in a second script call
 * COLD = each identity's first request, WARM = its second. Prints a markdown table.
 */
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { Redis } from "ioredis";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const { values } = parseArgs({ options: { identities: { type: "string", default: "200" } } });
const IDENTITIES = Number(values.identities);
const ALGORITHMS = ["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"];

/** The middleware and the engine, bundled from the sources (`*.lua` as text, as wrangler does). */
async function floodgate() {
  const out = await build({
    stdin: {
      contents: `export { rateLimit } from "./src/middleware/index.ts";
export { createEngine } from "./src/resilience/engine.ts";`,
      resolveDir: root,
      loader: "ts",
    },
    bundle: true,
    write: false,
    format: "esm",
    platform: "node",
    target: "es2022",
    loader: { ".lua": "text" },
    logLevel: "silent",
  });
  return import(
    `data:text/javascript;base64,${Buffer.from(out.outputFiles[0]?.text ?? "").toString("base64")}`
  );
}

const { rateLimit, createEngine } = await floodgate();
const { Hono } = await import("hono");

const server = await startRedis();
const rest = await startRestServer({ redisUrl: server.url });
const redis = new Redis(server.url);

/** Billable commands since the last reset (the bench's own CONFIG/INFO left out). */
async function commandsSinceReset() {
  const stats = await redis.info("commandstats");
  let calls = 0;
  for (const [, command, n] of stats.matchAll(/cmdstat_([a-z|]+):calls=(\d+)/g)) {
    if (command !== "config" && command !== "info") calls += Number(n);
  }
  return calls;
}

/** An app with one rule of `algorithm` (with `count` or not) whose handler answers `?status=`. */
function appOf(algorithm, count, prefix) {
  const engine = createEngine({
    endpoints: [{ url: rest.url, token: rest.token }],
    prefix,
    timeoutMs: 5000,
    leases: "off",
  });
  const refunds = [];
  const decider = {
    decide: (calls, id, opts) => engine.decider.decide(calls, id, opts),
    release: (call, id, reservation) => engine.decider.release(call, id, reservation),
    refund: (calls, id, whenUs) => {
      const refund = engine.decider.refund(calls, id, whenUs);
      refunds.push(refund);
      return refund;
    },
  };
  const app = new Hono();
  const rule = { name: "r", key: "header:x-user", algorithm, limit: 10_000, period: "1h" };
  app.use("*", rateLimit({ decider, rules: [count ? { ...rule, count: { status: ["401"] } } : rule] }));
  app.all("*", (c) => c.text("ok", Number(c.req.query("status"))));
  return { app, landed: () => Promise.all(refunds) };
}

/** Commands per request of one pass over `users`, every give-back landed. */
async function pass(app, landed, users, status) {
  await redis.config("RESETSTAT");
  for (const user of users) {
    const response = await app.request(`/?status=${status}`, { headers: { "x-user": user } });
    if (response.status !== status) throw new Error(`expected ${status}, got ${response.status}`);
  }
  await landed();
  return (await commandsSinceReset()) / users.length;
}

const rows = [];
for (const algorithm of ALGORITHMS) {
  const row = { algorithm };
  for (const [name, count, status] of [
    ["plain", false, 200],
    ["kept", true, 401],
    ["back", true, 200],
  ]) {
    const { app, landed } = appOf(algorithm, count, `bench-${name}-${algorithm}-${Date.now()}`);
    const users = Array.from({ length: IDENTITIES }, (_, i) => `${name}-${i}-${Math.random()}`);
    // The EVALSHAs' scripts loaded first (a NOSCRIPT reload is not what a request costs).
    await pass(app, landed, [`warmup-${Math.random()}`], status);
    row[`${name}Cold`] = await pass(app, landed, users, status);
    row[`${name}Warm`] = await pass(app, landed, users, status);
  }
  rows.push(row);
}

const f = (n) => n.toFixed(2);
console.log(
  "| algorithm | plain warm / cold | count, 401 kept warm / cold | count, 200 given back warm / cold | given back ÷ plain warm / cold |",
);
console.log("|---|---|---|---|---|");
for (const r of rows) {
  console.log(
    `| ${r.algorithm} | ${f(r.plainWarm)} / ${f(r.plainCold)} | ${f(r.keptWarm)} / ${f(r.keptCold)} | ${f(r.backWarm)} / ${f(r.backCold)} | ${f(r.backWarm / r.plainWarm)}× / ${f(r.backCold / r.plainCold)}× |`,
  );
}

redis.disconnect();
await rest.close();
await server.close();
