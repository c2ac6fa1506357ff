// `sync = "async"` rules (docs/going-global.md): decided in the isolate, never waiting on Redis, counted there
// after the response; across two real Worker instances hammering one identity, admitted at least the limit
// and never more than the documented bound above it (instances × a tenth of the capacity).
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type RestServer, startRestServer } from "../../redis-rest/index.mjs";
import { parseEnv } from "../../src/config";
import type { Env } from "../../src/env";
import { ASYNC_SHARE } from "../../src/leases/async";
import { startWorker } from "../support/miniflare-worker.mjs";

/** The database across an ocean: an async request must not pay it. */
const RTT_MS = 200;
const LIMIT = 40;
const PREFIX = `async${Date.now()}`;
const RULES = [
  {
    name: "async-api",
    match: { path: "/async/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: LIMIT,
    period: "1h",
    sync: "async",
  },
  {
    name: "exact-api",
    match: { path: "/exact/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 5,
    period: "1h",
  },
  // `/m/x` matches the async rule alone; `/m/exact/x` both: then Redis decides them together.
  {
    name: "mix-async",
    match: { path: "/m/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 40, // a share of 4 uncounted units per isolate: three requests in a row never wait for a flush
    period: "1h",
    sync: "async",
  },
  {
    name: "mix-exact",
    match: { path: "/m/exact/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 100,
    period: "1h",
  },
];

let faraway: RestServer;
const workers: Array<Awaited<ReturnType<typeof startWorker>>> = [];
const started: Array<{ dispose(): Promise<void> }> = [];

/** One more instance of the deployment: a fresh isolate. */
async function instance() {
  const worker = await startWorker({
    bindings: {
      ORIGIN_URL: inject("originUrl"),
      UPSTASH_REDIS_REST_URL: faraway.url,
      UPSTASH_REDIS_REST_TOKEN: faraway.token,
      RATE_LIMIT_RULES: JSON.stringify(RULES),
      RATE_LIMIT_PREFIX: PREFIX,
      RATE_LIMIT_TIMEOUT_MS: String(3 * RTT_MS),
    },
  });
  started.push(worker);
  return worker;
}

beforeAll(async () => {
  faraway = await startRestServer({ redisUrl: inject("redisUrl"), rttMs: RTT_MS });
  // Two instances of one deployment: two isolates, each with its own view of the identity.
  for (let i = 0; i < 2; i++) workers.push(await instance());
  // Each isolate's first limited request starts its live-mode read: out of the way of the timings below.
  for (const worker of workers) await send(worker, "/exact/warm", "192.0.2.99");
}, 60_000);
afterAll(async () => {
  await Promise.all(started.map((w) => w.dispose()));
  await faraway?.close();
});

async function send(worker: (typeof workers)[number], path: string, ip: string) {
  const started = performance.now();
  const response = await worker.fetch(path, { headers: { "CF-Connecting-IP": ip } });
  await response.arrayBuffer();
  return {
    status: response.status,
    ms: performance.now() - started,
    timing: response.headers.get("server-timing") ?? "",
    rateLimit: response.headers.get("ratelimit") ?? "",
  };
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('sync = "async" rules', () => {
  it("are decided in the isolate: a request never waits on the faraway database", async () => {
    const exact = await send(workers[0] as (typeof workers)[number], "/exact/x", "198.51.100.70");
    expect(exact.ms).toBeGreaterThanOrEqual(RTT_MS - 10); // an exact rule pays the round trip
    for (let i = 0; i < 5; i++) {
      const r = await send(workers[i % 2] as (typeof workers)[number], "/async/x", "198.51.100.71");
      expect(r.status).toBe(200);
      expect(r.timing).toBe('ratelimit;dur=0;desc="async"'); // decided with no wait at all
      expect(r.ms).toBeLessThan(RTT_MS);
    }
  }, 30_000);

  it("a fresh isolate's first async request waits for nothing either: its live-mode read lands in the background", async () => {
    const fresh = await instance();
    // The isolate started by a request no rule matches: the limiter, its live modes and Redis untouched.
    expect((await send(fresh, "/unlimited", "198.51.100.74")).status).toBe(200);
    const first = await send(fresh, "/async/first", "198.51.100.74");
    expect(first.status).toBe(200);
    expect(first.timing).toContain('desc="async"');
    expect(first.ms).toBeLessThan(0.75 * RTT_MS); // the read waited for would make it a whole round trip
  }, 30_000);

  it("are counted in Redis after the response, and decided there, exactly, beside an exact rule", async () => {
    const ip = "198.51.100.73";
    for (let i = 0; i < 3; i++) {
      const r = await send(workers[i % 2] as (typeof workers)[number], "/m/x", ip);
      expect(r.status).toBe(200);
      expect(r.timing).toContain('desc="async"');
    }
    await sleep(3 * RTT_MS); // the flushes are in
    const both = await send(workers[0] as (typeof workers)[number], "/m/exact/x", ip);
    expect(both.status).toBe(200);
    expect(both.timing).not.toContain("async"); // one Redis call for both rules
    expect(both.ms).toBeGreaterThanOrEqual(RTT_MS - 10);
    // Redis counted the three async requests and this one: 40 - 4 left.
    expect(both.rateLimit).toMatch(/"mix-async";r=36;/);
  }, 30_000);

  it("over-admit one identity hammered through two instances by no more than the documented bound", async () => {
    const ip = "198.51.100.72";
    const bound = workers.length * Math.ceil(LIMIT * ASYNC_SHARE);
    let admitted = 0;
    // Waves of concurrent requests into both instances, faster than a flush comes back: each isolate keeps
    // deciding on a view of the identity up to one round trip old. Until the limit is reached and a whole wave
    // is denied (counted, not timed: a busy machine only makes it take more waves).
    let waves = 0;
    for (let wholeWaveDenied = false; !(admitted >= LIMIT && wholeWaveDenied) && waves < 150; waves++) {
      const responses = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          send(workers[i % 2] as (typeof workers)[number], `/async/${waves}`, ip),
        ),
      );
      for (const r of responses) {
        expect([200, 429]).toContain(r.status);
        if (r.status === 200) admitted++;
      }
      wholeWaveDenied = responses.every((r) => r.status === 429);
      await sleep(RTT_MS / 4);
    }
    expect(admitted).toBeGreaterThanOrEqual(LIMIT);
    const hammered = admitted;
    // Counted in Redis after the responses: once its flushes are in, an instance that still admits does so
    // only within its share of a view it has not refreshed since, then learns the identity is out and denies.
    await sleep(3 * RTT_MS);
    for (const worker of workers) {
      for (let i = 0; i <= bound; i++) {
        const r = await send(worker, "/async/after", ip);
        if (r.status === 429) break;
        admitted++;
        await sleep(2 * RTT_MS);
      }
      expect((await send(worker, "/async/after", ip)).status).toBe(429);
    }
    console.log(
      `async rule, limit ${LIMIT}, one identity through 2 instances behind a ${RTT_MS} ms round trip: admitted ${admitted} (${hammered} in ${waves} waves of 10), documented bound ${LIMIT + bound}`,
    );
    expect(admitted).toBeLessThanOrEqual(LIMIT + bound);
  }, 90_000);
});

describe("config", () => {
  const env = (rule: Record<string, unknown>) =>
    ({
      ORIGIN_URL: "https://origin.example.com",
      UPSTASH_REDIS_REST_URL: "https://example.upstash.io",
      UPSTASH_REDIS_REST_TOKEN: "token-0123456789",
      RATE_LIMIT_RULES: JSON.stringify([{ name: "r", key: "ip", limit: 10, period: "1m", ...rule }]),
    }) as unknown as Env;

  it("names the field when a rule cannot be async, and takes the ones that can", () => {
    for (const rule of [
      { algorithm: "concurrency", sync: "async" },
      { algorithm: "sliding-log", sync: "async" },
      { algorithm: "gcra", delay: "1s", sync: "async" },
      { algorithm: "fixed-window", count: { status: ["401"] }, sync: "async" },
      { algorithm: "token-bucket", settle: "header:x-cost", sync: "async" },
      { algorithm: "fixed-window", block: "1m", sync: "async" },
      { algorithm: "fixed-window", period: "calendar:day", sync: "async" },
    ]) {
      expect(() => parseEnv(env(rule))).toThrow(/RATE_LIMIT_RULES\[0\]\.sync: "async" is for/);
    }
    expect(() => parseEnv(env({ algorithm: "fixed-window", sync: "sometimes" }))).toThrow(
      /RATE_LIMIT_RULES\[0\]\.sync/,
    );
    for (const algorithm of ["fixed-window", "sliding-window", "token-bucket", "gcra"]) {
      expect(parseEnv(env({ algorithm, sync: "async" })).rules[0]?.sync).toBe("async");
    }
    expect(parseEnv(env({ algorithm: "fixed-window" })).rules[0]?.sync).toBe("exact");
  });
});
