// The admin endpoints while Redis hangs (redis-server frozen with SIGSTOP): the real Worker in Miniflare in front
// of this file's own redis-server, REST server and echo origin. A load balancer's health check and an operator's
// dashboard must get an answer in a bounded time, not wait out every admin command's 5 s timeout.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ADMIN_TIMEOUT_MS,
  ADMIN_TOKEN,
  AUTH,
  type FrozenStack,
  openBreaker,
  startStack,
  TIMEOUT_MS,
  timed,
  warmWorker,
  whileFrozen,
} from "./frozen-redis";

const RULES = [{ name: "api", key: "ip", algorithm: "fixed-window", limit: 1000, period: "1h" }];

let stack: FrozenStack;

beforeAll(async () => {
  stack = await startStack();
}, 60_000);

afterAll(() => stack?.close());

describe("/__floodgate/health while Redis hangs", () => {
  it("answers within 2.5 s (not after the admin client's 5 s), degraded with Redis unreachable", async () => {
    const worker = await warmWorker(stack, RULES);
    await whileFrozen(stack, worker, async () => {
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
    const worker = await warmWorker(stack, RULES);
    await whileFrozen(stack, worker, async () => {
      await openBreaker(worker);
      const health = await timed(worker, "/__floodgate/health");
      expect(health.json).toMatchObject({ status: "degraded", redis: { reachable: false }, breaker: "open" });
      // Well within one decision budget: the open breaker is the answer.
      expect(health.ms).toBeLessThan(TIMEOUT_MS / 2);
    });
  });
});

describe("the dashboard while Redis hangs", () => {
  it("answers dashboard.json's first read after one admin timeout, not two (the flush and the reads)", async () => {
    const worker = await warmWorker(stack, RULES);
    await whileFrozen(stack, worker, async () => {
      const data = await timed(worker, "/__floodgate/dashboard.json", { headers: AUTH });
      expect(data.status).toBe(200);
      expect(data.json).toMatchObject({ health: { status: "degraded", redis: { reachable: false } } });
      expect(data.json.rules.map((r: { name: string }) => r.name)).toEqual(["api"]);
      expect(data.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  });

  it("answers at once while the breaker is open, from what the isolate knows", async () => {
    const worker = await warmWorker(stack, RULES);
    // A live switch this isolate learns as it makes it: its own copy of the modes holds it.
    const monitor = await worker.fetch("/__floodgate/mode", {
      method: "PUT",
      headers: { ...AUTH, "Content-Type": "application/json" },
      body: JSON.stringify({ mode: "monitor", rule: "api" }),
    });
    expect(monitor.status).toBe(200);
    await whileFrozen(stack, worker, async () => {
      await openBreaker(worker);
      const data = await timed(worker, "/__floodgate/dashboard.json", { headers: AUTH });
      expect(data.status).toBe(200);
      expect(data.json).toMatchObject({
        health: { status: "degraded", redis: { reachable: false }, breaker: "open" },
        rules: [{ name: "api", mode: { effective: "monitor", source: "live-rule" } }],
      });
      // As health answers with the breaker open: well within one decision budget, no wait on Redis at all.
      expect(data.ms).toBeLessThan(TIMEOUT_MS / 2);
    });
  });

  it("serves the page to a signed-in operator after one admin timeout, not two", async () => {
    const worker = await warmWorker(stack, RULES);
    const login = await worker.fetch("/__floodgate/login", {
      method: "POST",
      redirect: "manual",
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "http://floodgate.test" },
      body: new URLSearchParams({ token: ADMIN_TOKEN }),
    });
    expect(login.status).toBe(303);
    const cookie = (login.headers.get("Set-Cookie") ?? "").split(";")[0] as string;
    await whileFrozen(stack, worker, async () => {
      const page = await timed(worker, "/__floodgate/", { headers: { Cookie: cookie } });
      expect(page.status).toBe(200);
      expect(page.text).toContain('data-rule="api"');
      expect(page.text).toContain('<dd data-field="health.redis">unreachable</dd>');
      expect(page.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  });
});
