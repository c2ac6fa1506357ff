// Counting by the response (docs/counting.md) through the Hono middleware on the run's real Redis: a rule with
// `count = { status = [...] }` lets a request in only with room, and keeps its units only when the response's
// status is one it counts; every window and bucket algorithm; monitor mode counts and never denies; a bad
// `count` is a config error naming the field.
import { Hono } from "hono";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from "vitest";
import { ConfigError } from "../../src/config";
import { hashIdentity, stateKey } from "../../src/engine/keys";
import type { Decider } from "../../src/engine/types";
import { rateLimit } from "../../src/middleware";
import { createEngine } from "../../src/resilience/engine";

let direct: IORedis;
beforeAll(() => {
  direct = new IORedis(inject("redisUrl"), { lazyConnect: true, maxRetriesPerRequest: 1 });
  direct.on("error", () => {});
});
afterAll(() => direct?.disconnect());

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const HALF_HOUR_MS = 1_800_000;
/**
 * Away from the edges of the tests' windows (hours, and Asia/Kolkata's days, which start on a half hour of UTC),
 * by Redis's clock: a request decided in a window's first seconds gives nothing back (its refund cannot tell it
 * from the window before: docs/counting.md, "Exactness"), and no window may end mid-test.
 */
beforeEach(async () => {
  const [s, us] = await direct.time();
  const into = (Number(s) * 1000 + Math.floor(Number(us) / 1000)) % HALF_HOUR_MS;
  if (into < 10_000) await sleep(10_000 - into);
  else if (HALF_HOUR_MS - into < 20_000) await sleep(HALF_HOUR_MS - into + 10_000);
}, 60_000);

/**
 * The engine's decider, its refunds (the give-backs, sent in the background) remembered so that a test can wait
 * for every one sent so far to land.
 */
function recordingDecider(prefix: string): { decider: Decider; landed: () => Promise<number[][]> } {
  const engine = createEngine({
    endpoints: [{ url: inject("redisRestUrl"), token: inject("redisRestToken") }],
    prefix,
    timeoutMs: 5000,
    leases: "off",
  });
  const sent: Promise<number[]>[] = [];
  const decider: Decider = {
    decide: (calls, id, opts) => engine.decider.decide(calls, id, opts),
    release: (call, id, reservation) => engine.decider.release(call, id, reservation),
    refund: (calls, id, whenUs) => {
      const refund = engine.decider.refund?.(calls, id, whenUs) ?? Promise.resolve([]);
      sent.push(refund);
      return refund;
    },
  };
  return { decider, landed: () => Promise.all(sent) };
}

/** An app whose handler answers `?status=<code>`; the rule keys on `x-user`. */
function appWith(rule: Record<string, unknown>, decider: Decider, mode: "on" | "monitor" = "on") {
  const app = new Hono();
  app.use(
    "*",
    rateLimit({
      decider,
      mode,
      rules: [{ name: "login", key: "header:x-user", limit: 3, period: "1h", ...rule } as never],
    }),
  );
  app.all("*", (c) => c.text("answered", Number(c.req.query("status") ?? 200) as 200));
  return app;
}

const WINDOW_AND_BUCKET = ["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"] as const;

describe("count = { status = [...] }", () => {
  for (const algorithm of WINDOW_AND_BUCKET) {
    it(`${algorithm}: charges only the listed statuses, gives the rest back, and denies with no room`, async () => {
      const prefix = `count-${algorithm}-${Date.now().toString(36)}`;
      const { decider, landed } = recordingDecider(prefix);
      const app = appWith({ algorithm, count: { status: ["401", "403"] } }, decider);
      const user = { "x-user": `u-${crypto.randomUUID()}` };
      const ask = async (status: number) => {
        const response = await app.request(`/login?status=${status}`, { headers: user });
        await landed();
        return response.status;
      };
      // More successes than the limit: each one's unit goes back, none is charged.
      for (let i = 0; i < 6; i++) expect(await ask(200)).toBe(200);
      expect(await ask(500)).toBe(500); // not listed: given back too
      // The listed statuses are charged: three of them, and then no room for anyone.
      expect(await ask(401)).toBe(401);
      expect(await ask(403)).toBe(403);
      expect(await ask(200)).toBe(200);
      expect(await ask(401)).toBe(401);
      expect(await ask(200)).toBe(429);
      expect(await ask(401)).toBe(429);
    });
  }

  it("fixed-window over calendar days: charges only the listed statuses and gives the rest back", async () => {
    const prefix = `count-calendar-${Date.now().toString(36)}`;
    const { decider, landed } = recordingDecider(prefix);
    const app = appWith(
      {
        algorithm: "fixed-window",
        period: "calendar:day",
        timezone: "Asia/Kolkata",
        count: { status: ["4xx"] },
      },
      decider,
    );
    const user = { "x-user": `u-${crypto.randomUUID()}` };
    const ask = async (status: number) => {
      const response = await app.request(`/login?status=${status}`, { headers: user });
      await landed();
      return response.status;
    };
    for (let i = 0; i < 5; i++) expect(await ask(200)).toBe(200);
    for (let i = 0; i < 3; i++) expect(await ask(404)).toBe(404);
    expect(await ask(200)).toBe(429);
  });

  it("matches status classes, and a request in flight holds its unit until its status is known", async () => {
    const prefix = `count-class-${Date.now().toString(36)}`;
    const { decider, landed } = recordingDecider(prefix);
    const app = new Hono();
    app.use(
      "*",
      rateLimit({
        decider,
        rules: [
          {
            name: "errors",
            key: "header:x-user",
            algorithm: "fixed-window",
            limit: 2,
            period: "1h",
            count: { status: ["5xx"] },
          },
        ],
      }),
    );
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    app.get("/slow", async (c) => {
      await gate;
      return c.text("done");
    });
    app.all("*", (c) => c.text("answered", Number(c.req.query("status") ?? 200) as 200));
    const user = { "x-user": `u-${crypto.randomUUID()}` };
    // Two requests in flight hold both units: a third has no room, whatever its status would be.
    const slow = [app.request("/slow", { headers: user }), app.request("/slow", { headers: user })];
    await sleep(100);
    expect((await app.request("/?status=200", { headers: user })).status).toBe(429);
    release();
    expect((await Promise.all(slow)).map((r) => r.status)).toEqual([200, 200]);
    await landed();
    // Both gave their units back (200 is not a 5xx); 503 and 599 are, 404 is not.
    expect((await app.request("/?status=503", { headers: user })).status).toBe(503);
    expect((await app.request("/?status=404", { headers: user })).status).toBe(404);
    await landed();
    expect((await app.request("/?status=599", { headers: user })).status).toBe(599);
    await landed();
    expect((await app.request("/?status=200", { headers: user })).status).toBe(429);
  });

  it("gives the units back when the client leaves while its request waits for a delayed slot", async () => {
    const prefix = `count-delay-${Date.now().toString(36)}`;
    const { decider, landed } = recordingDecider(prefix);
    const app = new Hono();
    app.use(
      "*",
      rateLimit({
        decider,
        rules: [
          { name: "pace", key: "header:x-user", algorithm: "gcra", limit: 1, period: "4s", delay: "5s" },
          {
            name: "errors",
            key: "header:x-user",
            algorithm: "fixed-window",
            limit: 5,
            period: "1h",
            count: { status: ["5xx"] },
          },
        ],
      }),
    );
    app.all("*", (c) => c.text("answered", 500));
    const user = `u-${crypto.randomUUID()}`;
    const counter = stateKey(prefix, "errors", await hashIdentity(user));
    expect((await app.request("/", { headers: { "x-user": user } })).status).toBe(500);
    await landed();
    expect(await direct.get(counter)).toBe("1");
    // The next one waits for its slot (4 s on): the client goes away after 200 ms.
    const away = new AbortController();
    const waiting = app.request(
      new Request("http://x/", { headers: { "x-user": user }, signal: away.signal }),
    );
    await sleep(200);
    expect(await direct.get(counter)).toBe("2"); // held while it waits
    away.abort();
    expect((await waiting).status).toBe(499);
    await landed();
    expect(await direct.get(counter)).toBe("1");
  });

  it("in monitor mode counts the listed statuses and never denies", async () => {
    const prefix = `count-monitor-${Date.now().toString(36)}`;
    const { decider, landed } = recordingDecider(prefix);
    const decisions: { remaining: number; outcome: string }[] = [];
    const app = new Hono();
    app.use(
      "*",
      rateLimit({
        decider,
        mode: "monitor",
        onDecision: (event) => {
          const rule = event.decision.results[0];
          if (rule) decisions.push({ remaining: rule.remaining, outcome: rule.outcome });
        },
        rules: [
          {
            name: "login",
            key: "header:x-user",
            algorithm: "fixed-window",
            limit: 2,
            period: "1h",
            count: { status: ["401"] },
          },
        ],
      }),
    );
    app.all("*", (c) => c.text("answered", Number(c.req.query("status") ?? 200) as 200));
    const user = { "x-user": `u-${crypto.randomUUID()}` };
    const statuses: number[] = [];
    for (const status of [200, 401, 200, 401, 401, 401, 200]) {
      statuses.push((await app.request(`/?status=${status}`, { headers: user })).status);
      await landed();
    }
    expect(statuses).toEqual([200, 401, 200, 401, 401, 401, 200]);
    // Counted as if enforcing: the 200s gave their units back, the first two 401s used the limit, and from
    // then on the rule would have denied (and a request it would deny is not written).
    expect(decisions.map((d) => d.outcome)).toEqual([
      "allowed",
      "allowed",
      "allowed",
      "allowed",
      "denied",
      "denied",
      "denied",
    ]);
  });

  it("is a config error on concurrency and shed rules and for a bad status, naming the field", () => {
    const decider = recordingDecider("count-config").decider;
    const build = (rule: Record<string, unknown>) => () => appWith(rule, decider);
    expect(build({ algorithm: "concurrency", count: { status: ["5xx"] } })).toThrow(
      /rules\[0\]\.count: a concurrency rule holds a slot/,
    );
    expect(
      build({
        algorithm: "shed",
        priority: "method",
        priorities: { GET: 1 },
        count: { status: ["5xx"] },
      }),
    ).toThrow(/rules\[0\]\.count: a shed rule holds a slot/);
    expect(build({ algorithm: "fixed-window", count: { status: ["6xx"] } })).toThrow(
      /rules\[0\]\.count\.status\[0\]: "6xx" is not a status class \(1xx, 2xx, 3xx, 4xx or 5xx\)/,
    );
    expect(build({ algorithm: "fixed-window", count: { status: ["401", "99"] } })).toThrow(
      /rules\[0\]\.count\.status\[1\]: "99" is not a status code \("401"\) or class \("4xx"\)/,
    );
    expect(build({ algorithm: "fixed-window", count: { status: ["600"] } })).toThrow(
      /rules\[0\]\.count\.status\[0\]: "600" is not a status code \(100 to 599\)/,
    );
    expect(build({ algorithm: "fixed-window", count: { status: [] } })).toThrow(
      /rules\[0\]\.count\.status: an empty list counts no response/,
    );
    expect(build({ algorithm: "fixed-window", count: { codes: ["401"] } })).toThrow(ConfigError);
  });
});
