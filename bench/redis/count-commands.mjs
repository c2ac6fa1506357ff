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
 * and for a rule that settles its cost from the response (docs/settle.md), `cost = 2`, `settle = "header:x-cost"`:
 *   settle, more  the response says 5: 3 more charged in a second script call (lua/settle.lua)
 *   settle, less  the response says 1: 1 given back in a second script call (lua/refund.lua)
 * COLD = each identity's first request, WARM = its second. Prints two markdown tables; with --detail, each
 * pass's commands by name on stderr.
 */
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { Redis } from "ioredis";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const { values } = parseArgs({
  options: { identities: { type: "string", default: "200" }, detail: { type: "boolean", default: false } },
});
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

/** Billable commands since the last reset (the bench's own CONFIG/INFO left out), in all and by command. */
async function commandsSinceReset() {
  const stats = await redis.info("commandstats");
  let calls = 0;
  const by = {};
  for (const [, command, n] of stats.matchAll(/cmdstat_([a-z|]+):calls=(\d+)/g)) {
    if (!command.startsWith("config") && command !== "info") {
      calls += Number(n);
      by[command] = Number(n);
    }
  }
  return { calls, by };
}

/**
 * An app with one rule of `algorithm` (`kind`: "plain", "count" or "settle") whose handler answers `?status=`
 * with `x-cost: ?cost=`.
 */
function appOf(algorithm, kind, prefix) {
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
    settle: (settlements, id, decidedAtMs) => {
      const settled = engine.decider.settle(settlements, id, decidedAtMs);
      refunds.push(settled);
      return settled;
    },
  };
  const app = new Hono();
  const plain = { name: "r", key: "header:x-user", algorithm, limit: 10_000, period: "1h" };
  const rule = {
    plain,
    count: { ...plain, count: { status: ["401"] } },
    settle: { ...plain, cost: 2, settle: "header:x-cost" },
  }[kind];
  app.use("*", rateLimit({ decider, rules: [rule] }));
  app.all("*", (c) => {
    c.header("x-cost", c.req.query("cost") ?? "");
    return c.text("ok", Number(c.req.query("status")));
  });
  app.label = `${algorithm} ${kind}`;
  return { app, landed: () => Promise.all(refunds) };
}

/** Commands per request of one pass over `users`, every give-back landed. */
async function pass(app, landed, users, status, cost) {
  await redis.config("RESETSTAT");
  for (const user of users) {
    const response = await app.request(`/?status=${status}&cost=${cost}`, { headers: { "x-user": user } });
    await response.text(); // the body read to its end: a settlement runs once it has passed
    if (response.status !== status) throw new Error(`expected ${status}, got ${response.status}`);
  }
  await landed();
  const { calls, by } = await commandsSinceReset();
  if (values.detail) {
    const per = Object.entries(by).map(([c, n]) => `${c} ${(n / users.length).toFixed(2)}`);
    console.error(`${app.label} status ${status} cost ${cost}: ${per.join(", ")}`);
  }
  return calls / users.length;
}

const rows = [];
for (const algorithm of ALGORITHMS) {
  const row = { algorithm };
  for (const [name, kind, status, cost] of [
    ["plain", "plain", 200, ""],
    ["kept", "count", 401, ""],
    ["back", "count", 200, ""],
    ["more", "settle", 200, "5"],
    ["less", "settle", 200, "1"],
  ]) {
    if (kind === "settle" && algorithm === "sliding-log") continue; // no settle on a sliding log (docs/settle.md)
    const { app, landed } = appOf(algorithm, kind, `bench-${name}-${algorithm}-${Date.now()}`);
    const users = Array.from({ length: IDENTITIES }, (_, i) => `${name}-${i}-${Math.random()}`);
    // The EVALSHAs' scripts loaded first (a NOSCRIPT reload is not what a request costs).
    await pass(app, landed, [`warmup-${Math.random()}`], status, cost);
    row[`${name}Cold`] = await pass(app, landed, users, status, cost);
    row[`${name}Warm`] = await pass(app, landed, users, status, cost);
  }
  rows.push(row);
}

const f = (n) => (Number.isNaN(n) ? "–" : n.toFixed(2));
console.log(
  "| algorithm | plain warm / cold | count, 401 kept warm / cold | count, 200 given back warm / cold | given back ÷ plain warm / cold |",
);
console.log("|---|---|---|---|---|");
for (const r of rows) {
  console.log(
    `| ${r.algorithm} | ${f(r.plainWarm)} / ${f(r.plainCold)} | ${f(r.keptWarm)} / ${f(r.keptCold)} | ${f(r.backWarm)} / ${f(r.backCold)} | ${f(r.backWarm / r.plainWarm)}× / ${f(r.backCold / r.plainCold)}× |`,
  );
}
console.log();
console.log(
  "| algorithm | plain warm / cold | settle, 3 more charged warm / cold | settle, 1 given back warm / cold | more ÷ plain warm / cold | given back ÷ plain warm / cold |",
);
console.log("|---|---|---|---|---|---|");
for (const r of rows.filter((row) => row.moreWarm !== undefined)) {
  console.log(
    `| ${r.algorithm} | ${f(r.plainWarm)} / ${f(r.plainCold)} | ${f(r.moreWarm)} / ${f(r.moreCold)} | ${f(r.lessWarm)} / ${f(r.lessCold)} | ${f(r.moreWarm / r.plainWarm)}× / ${f(r.moreCold / r.plainCold)}× | ${f(r.lessWarm / r.plainWarm)}× / ${f(r.lessCold / r.plainCold)}× |`,
  );
}

redis.disconnect();
await rest.close();
await server.close();
