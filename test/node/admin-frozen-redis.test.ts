// The admin endpoints while Redis hangs (redis-server frozen with SIGSTOP): the real Worker in Miniflare in front
// of this file's own redis-server, REST server and echo origin. A load balancer's health check and an operator's
// dashboard must get an answer in a bounded time, not wait out every admin command's 5 s timeout.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { startEchoOrigin } from "../support/echo-origin.mjs";
import { startWorker } from "../support/miniflare-worker.mjs";

type Worker = Awaited<ReturnType<typeof startWorker>>;

/** The decision budget (RATE_LIMIT_TIMEOUT_MS): above the default 200, as this machine is shared and busy. */
const TIMEOUT_MS = 1000;
/** The admin client's timeout per command (the store's `adminTimeoutMs`). */
const ADMIN_TIMEOUT_MS = 5000;
const ADMIN_TOKEN = "frozen-admin-token-0123456789";
const RULES = [{ name: "api", key: "ip", algorithm: "fixed-window", limit: 1000, period: "1h" }];

let redis: Awaited<ReturnType<typeof startRedis>>;
let rest: Awaited<ReturnType<typeof startRestServer>>;
let origin: Awaited<ReturnType<typeof startEchoOrigin>>;
let seq = 0;

beforeAll(async () => {
  redis = await startRedis();
  rest = await startRestServer({ redisUrl: redis.url });
  origin = await startEchoOrigin();
}, 60_000);

afterAll(async () => {
  await origin?.close();
  await rest?.close();
  await redis?.close();
});

/** A Worker of its own (its own breaker, probe cache and pending counts), warmed up while Redis answers. */
async function warmWorker(): Promise<Worker> {
  const worker = await startWorker({
    bindings: {
      ORIGIN_URL: origin.url,
      UPSTASH_REDIS_REST_URL: rest.url,
      UPSTASH_REDIS_REST_TOKEN: rest.token,
      RATE_LIMIT_RULES: RULES,
      RATE_LIMIT_PREFIX: `frozen${Date.now()}-${++seq}`,
      RATE_LIMIT_TIMEOUT_MS: String(TIMEOUT_MS),
      RATE_LIMIT_ADMIN_TOKEN: ADMIN_TOKEN,
    },
  });
  // The first request loads the script and flushes its count at once; the second's count is left pending
  // (an isolate flushes at most every 5 s), for the dashboard to flush before it reads.
  for (let i = 0; i < 2; i++) expect((await proxied(worker)).status).toBe(200);
  expect((await timed(worker, "/__floodgate/health")).json.status).toBe("ok");
  // Health caches its probe's answer for a second: the checks below must ask the frozen Redis.
  await sleep(1100);
  return worker;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const proxied = (worker: Worker) => worker.fetch("/x", { headers: { "CF-Connecting-IP": "192.0.2.1" } });

async function timed(worker: Worker, path: string, headers: Record<string, string> = {}) {
  const started = performance.now();
  const response = await worker.fetch(path, { headers });
  const text = await response.text();
  const json = response.headers.get("content-type")?.includes("json") ? JSON.parse(text) : undefined;
  return { status: response.status, text, json, ms: performance.now() - started };
}

/** Runs `body` with redis-server frozen (SIGSTOP), and lets it go on afterwards whatever happened. */
async function whileFrozen(worker: Worker, body: () => Promise<void>): Promise<void> {
  redis.stop();
  try {
    await body();
  } finally {
    redis.cont();
    await worker.dispose();
  }
}

describe("/__floodgate/health while Redis hangs", () => {
  it("answers within 2.5 s (not after the admin client's 5 s), degraded with Redis unreachable", async () => {
    const worker = await warmWorker();
    await whileFrozen(worker, async () => {
      // The first check starts the probe; the second shares it while it still hangs.
      for (const check of [1, 2]) {
        const health = await timed(worker, "/__floodgate/health");
        expect(health.status, `check ${check}`).toBe(200);
        expect(health.json).toMatchObject({
          status: "degraded",
          redis: { reachable: false },
          breaker: "closed",
        });
        expect(health.ms, `check ${check}`).toBeLessThan(2500);
      }
    });
  });

  it("answers without waiting for Redis while the breaker is open", async () => {
    const worker = await warmWorker();
    await whileFrozen(worker, async () => {
      // Five decisions in a row run out of their budget: the breaker opens for a second.
      for (let i = 0; i < 5; i++) expect((await proxied(worker)).status).toBe(200);
      const health = await timed(worker, "/__floodgate/health");
      expect(health.json).toMatchObject({ status: "degraded", redis: { reachable: false }, breaker: "open" });
      // Well within one decision budget: the open breaker is the answer.
      expect(health.ms).toBeLessThan(TIMEOUT_MS / 2);
    });
  });
});

describe("the dashboard while Redis hangs", () => {
  it("answers dashboard.json's first read after one admin timeout, not two (the flush and the reads)", async () => {
    const worker = await warmWorker();
    await whileFrozen(worker, async () => {
      const data = await timed(worker, "/__floodgate/dashboard.json", {
        Authorization: `Bearer ${ADMIN_TOKEN}`,
      });
      expect(data.status).toBe(200);
      expect(data.json).toMatchObject({ health: { status: "degraded", redis: { reachable: false } } });
      expect(data.json.rules.map((r: { name: string }) => r.name)).toEqual(["api"]);
      expect(data.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  });

  it("serves the page to a signed-in operator after one admin timeout, not two", async () => {
    const worker = await warmWorker();
    const login = await worker.fetch("/__floodgate/login", {
      method: "POST",
      redirect: "manual",
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "http://floodgate.test" },
      body: new URLSearchParams({ token: ADMIN_TOKEN }),
    });
    expect(login.status).toBe(303);
    const cookie = (login.headers.get("Set-Cookie") ?? "").split(";")[0] as string;
    await whileFrozen(worker, async () => {
      const page = await timed(worker, "/__floodgate/", { Cookie: cookie });
      expect(page.status).toBe(200);
      expect(page.text).toContain('data-rule="api"');
      expect(page.text).toContain('<dd data-field="health.redis">unreachable</dd>');
      expect(page.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  });
});
