// The admin API's data routes while Redis hangs (redis-server frozen with SIGSTOP) or gets every command late
// (held back on its way): `/rules` still tells the effective rules and modes, and a route of several Redis
// commands waits for Redis once in all (the admin timeout), not once per command.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ADMIN_TIMEOUT_MS,
  AUTH,
  type FrozenStack,
  openBreaker,
  sleep,
  startStack,
  TIMEOUT_MS,
  timed,
  type Worker,
  warmWorker,
  whileFrozen,
} from "./frozen-redis";

// Fixed window: setting or removing an override also re-aims the identity's counter (one more command).
const RULES = [{ name: "api", key: "ip", algorithm: "fixed-window", limit: 1000, period: "1h" }];
const JSON_AUTH = { ...AUTH, "Content-Type": "application/json" };
const OVERRIDE = "/__floodgate/overrides/api/192.0.2.7";

let stack: FrozenStack;

beforeAll(async () => {
  stack = await startStack();
}, 60_000);

afterAll(() => stack?.close());

/** Runs `body` while every command reaches Redis `lagMs` late, each within the admin client's own timeout. */
async function whileLagging(worker: Worker, lagMs: number, body: () => Promise<void>): Promise<void> {
  stack.setLagMs(lagMs);
  try {
    await body();
  } finally {
    stack.setLagMs(0);
    await worker.dispose();
  }
}

describe("GET /__floodgate/rules when Redis cannot be read", () => {
  it("answers with the isolate's own copy of the live modes, and says so", async () => {
    const worker = await warmWorker(stack, RULES);
    const put = await timed(worker, "/__floodgate/mode", {
      method: "PUT",
      headers: JSON_AUTH,
      body: JSON.stringify({ mode: "monitor", rule: "api" }),
    });
    expect(put.json).toMatchObject({ liveModesFrom: "redis" });
    const live = await timed(worker, "/__floodgate/rules", { headers: AUTH });
    expect(live.json).toMatchObject({ liveModesFrom: "redis" });
    await whileFrozen(stack, worker, async () => {
      const rules = await timed(worker, "/__floodgate/rules", { headers: AUTH });
      expect(rules.status).toBe(200);
      // The switch made before Redis froze: this isolate obeys it, and shows it.
      expect(rules.json).toEqual({ ...live.json, liveModesFrom: "isolate" });
      expect(rules.json.rules[0].mode).toMatchObject({ effective: "monitor", source: "live-rule" });
      expect(rules.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  });
});

describe("GET /__floodgate/rules while the breaker is open", () => {
  it("answers at once with the isolate's own copy, as the dashboard does", async () => {
    const worker = await warmWorker(stack, RULES);
    await whileFrozen(stack, worker, async () => {
      await openBreaker(worker);
      const rules = await timed(worker, "/__floodgate/rules", { headers: AUTH });
      expect(rules.status).toBe(200);
      expect(rules.json).toMatchObject({ liveModesFrom: "isolate", rules: [{ name: "api" }] });
      expect(rules.ms).toBeLessThan(TIMEOUT_MS / 2);
    });
  });
});

describe("other admin writes while Redis answers each command late", () => {
  it("DELETE /keys (the override read, fence and delete in one script call, the change log) gives up after one admin timeout in all", async () => {
    const worker = await warmWorker(stack, RULES);
    await whileLagging(worker, 3000, async () => {
      const reset = await timed(worker, "/__floodgate/keys/api/192.0.2.7", {
        method: "DELETE",
        headers: AUTH,
      });
      expect(reset.status).toBe(503);
      expect(reset.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  }, 60_000);

  it("PUT /mode (a write, then the read back) gives up after one admin timeout in all", async () => {
    const worker = await warmWorker(stack, RULES);
    await whileLagging(worker, 3000, async () => {
      const put = await timed(worker, "/__floodgate/mode", {
        method: "PUT",
        headers: JSON_AUTH,
        body: JSON.stringify({ mode: "monitor" }),
      });
      expect(put.status).toBe(503);
      expect(put.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  }, 60_000);
});

describe("override changes while Redis answers each command late", () => {
  it("PUT gives up after one admin timeout in all, with a 503", async () => {
    const worker = await warmWorker(stack, RULES);
    await whileLagging(worker, 3000, async () => {
      const put = await timed(worker, OVERRIDE, {
        method: "PUT",
        headers: JSON_AUTH,
        body: JSON.stringify({ limit: 5 }),
      });
      expect(put.status).toBe(503);
      expect(put.json).toMatchObject({ status: 503, title: "Service Unavailable" });
      expect(put.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
      // The announcement (two commands) took the whole wait: the override itself was never sent, so once
      // everything in flight has landed there is none, and the client keeps the rule's own limit. (An override
      // whose write the deadline cuts short is announced already, so it applies wherever it lands.)
      stack.setLagMs(0);
      await sleep(4000);
      expect((await timed(worker, OVERRIDE, { headers: AUTH })).status).toBe(404);
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) {
        const res = await worker.fetch("/x", { headers: { "CF-Connecting-IP": "192.0.2.7" } });
        statuses.push(res.status);
        await res.text();
      }
      expect(statuses).toEqual([200, 200, 200, 200, 200, 200]);
    });
  }, 60_000);

  it("DELETE gives up after one admin timeout in all, with a 503", async () => {
    const worker = await warmWorker(stack, RULES);
    const put = await timed(worker, OVERRIDE, {
      method: "PUT",
      headers: JSON_AUTH,
      body: JSON.stringify({ limit: 5 }),
    });
    expect(put.status).toBe(200);
    await whileLagging(worker, 3000, async () => {
      const removed = await timed(worker, OVERRIDE, { method: "DELETE", headers: AUTH });
      expect(removed.status).toBe(503);
      expect(removed.ms).toBeLessThan(ADMIN_TIMEOUT_MS + 2500);
    });
  }, 60_000);
});
