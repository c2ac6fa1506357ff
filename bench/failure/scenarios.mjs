/**
 * The failure table: what a client of Floodgate sees in each failure, measured on the real Worker under
 * `workerd serve` in front of a real redis-server (killed, frozen, flushed, restarted), a wrong token and a
 * dead or slow origin. Sequential requests, so each latency is one request's own.
 *
 *   node bench/failure/scenarios.mjs
 *
 * Prints a markdown table; writes bench/results/failure-scenarios.md and .json. Not part of `npm test`.
 */
import { Redis as IORedis } from "ioredis";
import { startRedis } from "../../redis-rest/index.mjs";
import { startEchoOrigin } from "../../test/support/echo-origin.mjs";
import { IP_HEADER, startFloodgate } from "../lib/floodgate.mjs";
import { stopAll } from "../lib/procs.mjs";
import { fmt, machine, median, table, writeResults } from "../lib/report.mjs";
import { restCommand, startRest } from "../lib/stack.mjs";

const timeoutMs = 200;
const originTimeoutMs = 1000;
const rules = [
  {
    name: "open",
    match: { path: "/open/*" },
    key: "ip",
    algorithm: "sliding-window",
    limit: 1e9,
    period: "1m",
  },
  {
    name: "closed",
    match: { path: "/closed/*" },
    key: "ip",
    algorithm: "sliding-window",
    limit: 1e9,
    period: "1m",
    failure: "closed",
  },
  { name: "deny", match: { path: "/deny/*" }, key: "ip", algorithm: "fixed-window", limit: 2, period: "30s" },
  // The echo origin delays `/slow?ms=N`.
  { name: "slow", match: { path: "/slow" }, key: "ip", algorithm: "fixed-window", limit: 1e9, period: "1m" },
];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let ipSeq = 0;
const freshIp = () => `203.0.${Math.floor(++ipSeq / 250)}.${(ipSeq % 250) + 1}`;

/** One request: status, latency, whether Redis decided it (Server-Timing names a reason otherwise). */
async function send(worker, path, ip = freshIp()) {
  const started = performance.now();
  const response = await fetch(`${worker.url}${path}`, { headers: { [IP_HEADER]: ip } });
  await response.arrayBuffer();
  const timing = response.headers.get("server-timing") ?? "";
  return {
    status: response.status,
    ms: performance.now() - started,
    degraded: /desc=/.test(timing) ? /desc="?([a-z_-]+)/.exec(timing)?.[1] : null,
    retryAfter: response.headers.get("retry-after"),
  };
}

const statusCounts = (list) => {
  const counts = {};
  for (const r of list) counts[r.status] = (counts[r.status] ?? 0) + 1;
  return Object.entries(counts)
    .map(([status, n]) => `${n}× ${status}`)
    .join(", ");
};
const ms = (list) =>
  `p50 ${fmt(median(list.map((r) => r.ms)), 1)} ms, max ${fmt(Math.max(...list.map((r) => r.ms)), 1)} ms`;

const redis = await startRedis();
const origin = await startEchoOrigin();
const direct = new IORedis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
direct.on("error", () => {});
const rows = [];
const raw = {};
try {
  const rest = await startRest(redis.url);
  const base = { rest, origin, rules, prefix: `fail-${Date.now()}` };
  const bindings = { RATE_LIMIT_TIMEOUT_MS: String(timeoutMs), ORIGIN_TIMEOUT_MS: String(originTimeoutMs) };
  const worker = await startFloodgate("floodgate", { ...base, bindings });
  const until = async (predicate, limitMs = 15_000) => {
    const started = Date.now();
    for (;;) {
      const r = await send(worker, "/open/resume");
      if (predicate(r) || Date.now() - started > limitMs) return Date.now() - started;
      await sleep(20);
    }
  };
  const scriptCalls = async () => {
    const info = await direct.info("commandstats");
    return [...info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)].reduce((n, m) => n + Number(m[2]), 0);
  };
  const restUp = async () => {
    for (let i = 0; i < 200; i++) {
      if (await restCommand(rest, ["PING"]).catch(() => false)) return;
      await sleep(25);
    }
  };

  for (let i = 0; i < 20; i++) await send(worker, "/open/warm"); // JIT, connections, script cache
  const healthy = [];
  for (let i = 0; i < 30; i++) healthy.push(await send(worker, "/open/x"));
  raw.healthy = healthy;
  rows.push(["none (Redis healthy)", "200, RateLimit headers", `${statusCounts(healthy)}; ${ms(healthy)}`]);

  // Redis killed: the REST server answers 5xx at once.
  await redis.kill();
  const killedOpen = [];
  for (let i = 0; i < 30; i++) killedOpen.push(await send(worker, "/open/x"));
  const killedClosed = [];
  for (let i = 0; i < 5; i++) killedClosed.push(await send(worker, "/closed/x"));
  await redis.restart();
  await restUp();
  const resumeMs = await until((r) => r.status === 200 && r.degraded === null);
  raw.killed = { killedOpen, killedClosed, resumeMs };
  rows.push([
    "Redis killed, fail-open rule",
    "200 (proxied; local fallback limiter), no 5xx",
    `${statusCounts(killedOpen)}; ${ms(killedOpen)}`,
  ]);
  rows.push([
    "Redis killed, fail-closed rule",
    "503 problem+json, Retry-After = breaker cool-down",
    `${statusCounts(killedClosed)}; Retry-After ${killedClosed.map((r) => r.retryAfter).join(",")} s; ${ms(killedClosed)}`,
  ]);
  rows.push([
    "Redis back after a kill",
    "decided by Redis again within one cool-down",
    `after ${fmt(resumeMs)} ms`,
  ]);

  // Redis frozen: every call would hang; the budget and then the breaker bound it.
  redis.stop();
  const frozen = [];
  for (let i = 0; i < 15; i++) frozen.push(await send(worker, "/open/x"));
  redis.cont();
  raw.frozen = frozen;
  const beforeOpen = frozen.slice(0, 5);
  const afterOpen = frozen.slice(5);
  rows.push([
    "Redis frozen (SIGSTOP), until the breaker opens",
    `200 after the ${timeoutMs} ms budget (5 requests)`,
    `${statusCounts(beforeOpen)}; ${ms(beforeOpen)}`,
  ]);
  rows.push([
    "Redis frozen, breaker open",
    "200 at once, no Redis call",
    `${statusCounts(afterOpen)}; ${ms(afterOpen)}`,
  ]);
  await until((r) => r.status === 200 && r.degraded === null);

  // Script cache loss: SCRIPT FLUSH between requests, then a restart.
  const flushed = [];
  for (let i = 0; i < 10; i++) {
    await direct.script("FLUSH");
    flushed.push(await send(worker, "/open/x"));
  }
  await redis.restart();
  await restUp();
  const restarted = [];
  for (let i = 0; i < 10; i++) restarted.push(await send(worker, "/open/x"));
  raw.scriptLoss = { flushed, restarted };
  const undecided = (list) => list.filter((r) => r.status !== 200 || r.degraded !== null).length;
  rows.push([
    "SCRIPT FLUSH before each request",
    "200, decided by Redis (NOSCRIPT → EVAL, once)",
    `${statusCounts(flushed)}; ${undecided(flushed)} not decided by Redis; ${ms(flushed)}`,
  ]);
  rows.push([
    "redis-server restarted (empty)",
    "200, decided by Redis; counting starts over",
    `${statusCounts(restarted)}; ${undecided(restarted)} not decided by Redis; ${ms(restarted)}`,
  ]);

  // Deny cache: a denied client costs no Redis call until its Retry-After.
  const ip = freshIp();
  for (let i = 0; i < 3; i++) await send(worker, "/deny/x", ip);
  const callsBefore = await scriptCalls();
  const cached = [];
  for (let i = 0; i < 50; i++) cached.push(await send(worker, "/deny/x", ip));
  const callsAfter = await scriptCalls();
  raw.denyCache = { cached, redisCalls: callsAfter - callsBefore };
  rows.push([
    "a denied client keeps sending",
    "429 from isolate memory until Retry-After",
    `${statusCounts(cached)}; ${callsAfter - callsBefore} Redis calls for 50 requests; ${ms(cached)}`,
  ]);

  // Origin slow / down.
  const slow = [];
  for (let i = 0; i < 3; i++) slow.push(await send(worker, `/slow?ms=${originTimeoutMs * 3}`));
  rows.push([
    `origin slower than ORIGIN_TIMEOUT_MS (${originTimeoutMs} ms)`,
    "504 problem+json; the request stays counted",
    `${statusCounts(slow)}; ${ms(slow)}`,
  ]);
  await worker.stop();

  const deadOrigin = { url: "http://127.0.0.1:9" };
  const orphan = await startFloodgate("floodgate-dead-origin", { ...base, origin: deadOrigin, bindings });
  const unreachable = [];
  for (let i = 0; i < 5; i++) unreachable.push(await send(orphan, "/open/x"));
  await orphan.stop();
  rows.push(["origin unreachable", "502 problem+json", `${statusCounts(unreachable)}; ${ms(unreachable)}`]);

  const token = "not-the-token-0123456789";
  const wrong = await startFloodgate("floodgate-wrong-token", {
    ...base,
    rest: { ...rest, token },
    bindings,
  });
  const wrongOpen = [];
  for (let i = 0; i < 10; i++) wrongOpen.push(await send(wrong, "/open/x"));
  const wrongClosed = await send(wrong, "/closed/x");
  const health = await (await fetch(`${wrong.url}/__floodgate/health`)).text();
  const leaked = wrong.output().includes(token) || health.includes(token);
  await wrong.stop();
  raw.wrongToken = { wrongOpen, wrongClosed, health };
  rows.push([
    "wrong UPSTASH_REDIS_REST_TOKEN",
    "failure policy applied; health degraded; one log line; token never shown",
    `open: ${statusCounts(wrongOpen)}; closed: ${wrongClosed.status}; health ${JSON.parse(health).status}; token in output: ${leaked ? "YES" : "no"}`,
  ]);

  const markdown = [
    `Floodgate under \`workerd serve\`, RATE_LIMIT_TIMEOUT_MS=${timeoutMs}, sequential requests from one client connection.`,
    "",
    table(["failure", "what the client gets", "measured"], rows),
    "",
    machine(),
  ].join("\n");
  console.log(markdown);
  writeResults("failure-scenarios", markdown, { timeoutMs, originTimeoutMs, rows, raw });
} finally {
  direct.disconnect();
  await stopAll();
  await origin.close();
  await redis.close();
}
