#!/usr/bin/env node
/**
 * What the dashboard's counts cost in Redis: the real Worker (bundled, in Miniflare: one isolate) in front of
 * an ephemeral redis-server through the local REST server, under steady traffic for `--seconds` (default 60),
 * in two scenarios: every request allowed by 3 rules, and 3 rules denying most of 200 identities. Counted
 * with INFO commandstats, side by side with the decisions' own EVALSHA calls:
 *   node bench/dashboard/run.mjs [--seconds 60]
 * Then `GET /__floodgate/dashboard.json` twice, 5 s apart: what an open page reads first and on each refresh.
 * Prints a markdown table and writes bench/results/dashboard.md. Never part of `npm test`.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { startEchoOrigin } from "../../test/support/echo-origin.mjs";
import { startWorker } from "../../test/support/miniflare-worker.mjs";

const { values } = parseArgs({ options: { seconds: { type: "string", default: "60" } } });
const SECONDS = Number(values.seconds);
const RATE_PER_SECOND = 50;
const ADMIN_TOKEN = "bench-admin-token";
const METRICS_COMMANDS = ["hincrby", "expire", "zincrby", "zadd"];
const log = (line) => process.stderr.write(`${line}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const rules = (limit) => [
  { name: "per-ip", key: "ip", algorithm: "sliding-window", limit, period: "1m" },
  { name: "per-key", key: "header:x-api-key", algorithm: "token-bucket", limit, period: "1m" },
  {
    name: "global",
    key: "global",
    algorithm: "fixed-window",
    limit: 1_000_000,
    period: "1m",
    mode: "monitor",
  },
];
const SCENARIOS = [
  { name: "3 rules, all allowed, 20 identities", rules: rules(1_000_000), identities: 20 },
  { name: "3 rules, most denied, 200 identities", rules: rules(2), identities: 200 },
];

async function commandstats(direct) {
  const info = await direct.info("commandstats");
  const calls = {};
  for (const match of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) calls[match[1]] = Number(match[2]);
  return calls;
}
const delta = (after, before, names) => names.reduce((sum, n) => sum + (after[n] ?? 0) - (before[n] ?? 0), 0);

const redis = await startRedis();
const rest = await startRestServer({ redisUrl: redis.url });
const origin = await startEchoOrigin();
const direct = new Redis(redis.url);
const rows = [];
try {
  for (const [i, scenario] of SCENARIOS.entries()) {
    log(`${scenario.name}: ${SECONDS} s at ${RATE_PER_SECOND} req/s`);
    const worker = await startWorker({
      bindings: {
        ORIGIN_URL: origin.url,
        UPSTASH_REDIS_REST_URL: rest.url,
        UPSTASH_REDIS_REST_TOKEN: rest.token,
        RATE_LIMIT_RULES: JSON.stringify(scenario.rules),
        RATE_LIMIT_PREFIX: `bench${i}`,
        RATE_LIMIT_ADMIN_TOKEN: ADMIN_TOKEN,
        RATE_LIMIT_TIMEOUT_MS: "2000",
      },
    });
    await worker
      .fetch("/warm", { headers: { "CF-Connecting-IP": "192.0.2.1" } })
      .then((r) => r.arrayBuffer());
    await sleep(6000); // past the first flush
    const before = await commandstats(direct);
    const started = Date.now();
    let sent = 0;
    while (Date.now() - started < SECONDS * 1000) {
      const n = sent++ % scenario.identities;
      const response = await worker.fetch("/x", {
        headers: { "CF-Connecting-IP": `10.0.${n >> 8}.${n & 255}`, "x-api-key": `key-${n}` },
      });
      await response.arrayBuffer();
      const due = started + (sent * 1000) / RATE_PER_SECOND;
      if (due > Date.now()) await sleep(due - Date.now());
    }
    const elapsedMin = (Date.now() - started) / 60_000;
    const after = await commandstats(direct);
    const metrics = delta(after, before, METRICS_COMMANDS);
    const decisions = delta(after, before, ["evalsha", "eval"]);
    // What an open page costs: its first read, then a refresh 5 s later (settled minutes are cached).
    const reads = [];
    for (const waitMs of [0, 5000]) {
      await sleep(waitMs);
      const readBefore = await commandstats(direct);
      const page = await worker.fetch("/__floodgate/dashboard.json", {
        headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      await page.arrayBuffer();
      const total = (stats) => Object.values(stats).reduce((a, b) => a + b, 0);
      reads.push(total(await commandstats(direct)) - total(readBefore) - 1); // minus this INFO
    }
    rows.push({
      scenario: scenario.name,
      requests: sent,
      perMinute: Math.round(metrics / elapsedMin),
      byCommand: METRICS_COMMANDS.map(
        (c) => `${c} ${Math.round(delta(after, before, [c]) / elapsedMin)}`,
      ).join(", "),
      perRequest: (metrics / sent).toFixed(3),
      decisionsPerRequest: (decisions / sent).toFixed(2),
      read: reads.join(" / "),
    });
    await worker.dispose();
  }
} finally {
  direct.disconnect();
  await origin.close();
  await rest.close();
  await redis.close();
}

const table = [
  `Dashboard metrics flush, one isolate, ${SECONDS} s at ${RATE_PER_SECOND} req/s per scenario (INFO commandstats; the machine was shared).`,
  "",
  "| scenario | requests | flush commands / isolate / min | of which | flush commands / request | decision EVALSHA / request | dashboard.json: first read / refresh |",
  "|---|---:|---:|---|---:|---:|---:|",
  ...rows.map(
    (r) =>
      `| ${r.scenario} | ${r.requests} | ${r.perMinute} | ${r.byCommand} | ${r.perRequest} | ${r.decisionsPerRequest} | ${r.read} |`,
  ),
  "",
].join("\n");
process.stdout.write(table);
const out = fileURLToPath(new URL("../results/", import.meta.url));
mkdirSync(out, { recursive: true });
writeFileSync(`${out}dashboard.md`, table);
