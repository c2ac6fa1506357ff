// What a request waits for when the database is far away (docs/going-global.md): the real Worker, with the admin
// token set (dashboard counts, live modes, override index, metrics totals), in front of a REST server behind an
// added round trip (`redis-rest --rtt`). A request pays the one round trip of its decision, never a live-mode
// read, an override-index load, a refresh or a flush; and what those reads are for still holds from a fresh
// isolate's very first request: an old live switch is obeyed, an old override applies.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type RestServer, startRestServer } from "../../redis-rest/index.mjs";
import { hashIdentity, overrideKey } from "../../src/engine/keys";
import { startWorker } from "../support/miniflare-worker.mjs";

/**
 * The added round trip: large, so a second one cannot hide in the noise of a busy machine (a fresh isolate's
 * first request also pays its own start: compiling, the first connection; a few hundred ms under load).
 */
const RTT_MS = 600;
/** One round trip and the slack of a busy machine (a fresh isolate starting, other tests running); two never fit. */
const ONE_TRIP_MS = 1.8 * RTT_MS;
const PREFIX = `rtt${Date.now()}`;
const RULES = [
  { name: "api", match: { path: "/api/*" }, key: "ip", algorithm: "fixed-window", limit: 1, period: "1h" },
  {
    name: "wide",
    match: { path: "/wide/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 1000,
    period: "1h",
  },
];

let faraway: RestServer;
const workers: Array<{ dispose(): Promise<void> }> = [];
let ipSeq = 0;
const freshIp = () => `203.0.${Math.floor(++ipSeq / 250)}.${(ipSeq % 250) + 1}`;

beforeAll(async () => {
  faraway = await startRestServer({ redisUrl: inject("redisUrl"), rttMs: RTT_MS });
  // The scripts loaded once (a NOSCRIPT's reload is a round trip of its own, once per Redis, not per isolate).
  await send(await isolate(), "/wide/prime", freshIp());
}, 30_000);
afterAll(async () => {
  await Promise.all(workers.map((w) => w.dispose()));
  await faraway?.close();
});

/** A deny rule before the counting rules: the limiter walks the rules in order (docs/lists.md). */
const WITH_ACTION = [{ name: "blocked", action: "deny", match: { path: "/blocked/*" } }, ...RULES];

/** A fresh isolate of the deployment (its own bindings object: its own live-mode copy, leases, caches). */
async function isolate(rules: readonly object[] = RULES) {
  const worker = await startWorker({
    bindings: {
      ORIGIN_URL: inject("originUrl"),
      UPSTASH_REDIS_REST_URL: faraway.url,
      UPSTASH_REDIS_REST_TOKEN: faraway.token,
      RATE_LIMIT_RULES: JSON.stringify(rules),
      RATE_LIMIT_PREFIX: PREFIX,
      RATE_LIMIT_ADMIN_TOKEN: "request-path-admin-token-0123456789",
      // Room for two round trips: a request that waited for the live modes first would still be decided
      // by Redis, only later.
      RATE_LIMIT_TIMEOUT_MS: String(3 * RTT_MS),
    },
  });
  workers.push(worker);
  return worker;
}

/** One request from `ip`: its status, the time it took and its Server-Timing. */
async function send(worker: Awaited<ReturnType<typeof isolate>>, path: string, ip: string) {
  const started = performance.now();
  const response = await worker.fetch(path, { headers: { "CF-Connecting-IP": ip } });
  await response.arrayBuffer();
  return {
    status: response.status,
    ms: performance.now() - started,
    timing: response.headers.get("server-timing") ?? "",
    policy: response.headers.get("ratelimit-policy"),
  };
}

/** A command on the same Redis, through the run's nearby REST server (setting the scene costs no round trip). */
async function command(args: (string | number)[]) {
  const response = await fetch(inject("redisRestUrl"), {
    method: "POST",
    headers: { authorization: `Bearer ${inject("redisRestToken")}` },
    body: JSON.stringify(args),
  });
  return ((await response.json()) as { result: unknown }).result;
}

/** Each test starts Workers and waits out several long round trips: room on a busy machine. */
const SLOW_TEST_MS = 90_000;

describe("a request's path, the database one long round trip away", () => {
  it(
    "a fresh isolate's first request pays one round trip, not two (the live modes and override index load beside it)",
    async () => {
      const worker = await isolate();
      // The isolate started, by a request no rule matches: the limiter, its live modes and Redis untouched.
      expect((await send(worker, "/unlimited", freshIp())).policy).toBeNull();
      const first = await send(worker, "/wide/first", freshIp());
      expect(first.status).toBe(200);
      expect(first.timing).not.toContain("desc="); // decided by Redis, within its budget
      // One round trip and the isolate's own start; a read waited for first would make it two.
      expect(first.ms).toBeLessThan(ONE_TRIP_MS);
    },
    SLOW_TEST_MS,
  );

  it(
    "a warm isolate's requests never wait for a refresh or a flush: one round trip each, across several of both",
    async () => {
      const worker = await isolate();
      await send(worker, "/wide/warm", freshIp());
      const slowest: number[] = [];
      // Past 1 s (a live-mode refresh, with its change-log read) and 5 s (the dashboard's and metrics' flush).
      const until = performance.now() + 6_500;
      while (performance.now() < until || slowest.length < 12) {
        const { status, ms, timing } = await send(worker, "/wide/warm", freshIp());
        expect(status).toBe(200);
        expect(timing).not.toContain("desc=");
        slowest.push(ms);
      }
      expect(Math.max(...slowest)).toBeLessThan(ONE_TRIP_MS);
    },
    SLOW_TEST_MS,
  );

  it(
    "a fresh isolate's first request still obeys a live switch made long before it started",
    async () => {
      const ip = freshIp();
      const warm = await isolate();
      expect((await send(warm, "/api/x", ip)).status).toBe(200);
      expect((await send(warm, "/api/x", ip)).status).toBe(429); // limit 1: used up
      await command(["hset", `${PREFIX}:mode`, "rule:api", "monitor"]);
      try {
        const monitored = await send(await isolate(), "/api/x", ip); // decided twice: a switch is in force
        expect(monitored.status).toBe(200); // monitor: counted, never denied
        expect(monitored.policy).toContain('"api"');
        await command(["hset", `${PREFIX}:mode`, "rule:api", "off"]);
        const off = await send(await isolate(), "/api/x", ip);
        expect(off.status).toBe(200);
        expect(off.policy).toBeNull(); // off: no headers, no decision
      } finally {
        await command(["hdel", `${PREFIX}:mode`, "rule:api"]);
      }
      // Switch cleared: a fresh isolate's first request is denied again, at one round trip.
      const denied = await send(await isolate(), "/api/x", ip);
      expect(denied.status).toBe(429);
      expect(denied.ms).toBeLessThan(ONE_TRIP_MS);
    },
    SLOW_TEST_MS,
  );

  it(
    "with an action rule too: one round trip for a fresh isolate's first request, and a live switch of the deny rule obeyed",
    async () => {
      const first = await send(await isolate(WITH_ACTION), "/wide/walked", freshIp());
      expect(first.status).toBe(200);
      expect(first.ms).toBeLessThan(ONE_TRIP_MS);
      expect((await send(await isolate(WITH_ACTION), "/blocked/x", freshIp())).status).toBe(403);
      await command(["hset", `${PREFIX}:mode`, "rule:blocked", "off"]);
      try {
        // Walked again under the switch: the deny rule is off, the request goes on to the origin.
        expect((await send(await isolate(WITH_ACTION), "/blocked/x", freshIp())).status).toBe(200);
      } finally {
        await command(["hdel", `${PREFIX}:mode`, "rule:blocked"]);
      }
    },
    SLOW_TEST_MS,
  );

  it(
    "a fresh isolate's first request applies an override written before it started",
    async () => {
      const ip = freshIp();
      const hash = await hashIdentity(ip);
      // Two a day instead of a thousand an hour, written as the admin API writes it (the hash, and the index).
      await command(["hset", overrideKey(PREFIX, "wide", hash), "limit", 2, "period", 86_400_000]);
      await command(["sadd", `${PREFIX}:overrides`, `wide|${hash}`]);
      const warm = await isolate();
      expect((await send(warm, "/wide/o", ip)).status).toBe(200);
      expect((await send(warm, "/wide/o", ip)).status).toBe(200);
      expect((await send(await isolate(), "/wide/o", ip)).status).toBe(429);
    },
    SLOW_TEST_MS,
  );
});
