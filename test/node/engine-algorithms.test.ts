/**
 * Each algorithm on real Redis through the local REST server: exactly `limit` admitted, the next denied,
 * an honest retryAfterMs, refill/slide over time, cost, overrides, monitor and peek.
 * Time travel uses the script's test-only offset (added to Redis TIME); fixed windows, whose counters
 * expire on Redis's own clock, are tested in real time with short windows.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { overrideKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import type { Algorithm, RuleCall } from "../../src/engine/types";
import {
  directRedis,
  offsetToWindowStart,
  redisNowMs,
  requestId,
  ruleCall,
  sleep,
  testStore,
  uniquePrefix,
} from "./lua-support";

let redis: IORedis;
let store: Store;
const prefix = uniquePrefix("algorithms");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

const PERIOD = 60_000;
/** Decides one call at a time-offset; returns the one rule's result. */
async function hit(call: RuleCall, timeOffsetMs = 0, opts: { peek?: boolean } = {}) {
  const decision = await store.decide([call], requestId(), { timeOffsetMs, ...opts });
  const result = decision.results[0];
  if (!result) throw new Error("no result");
  return { allowed: decision.allowed, ...result };
}

const timeTravelling: Algorithm[] = ["sliding-window", "sliding-log", "token-bucket", "gcra", "concurrency"];

describe.each(timeTravelling)("%s", (algorithm) => {
  it("admits exactly `limit` requests, denies the next, and its retryAfterMs is honest", async () => {
    const call = ruleCall({ algorithm, limit: 5, periodMs: PERIOD });
    const t0 = await offsetToWindowStart(redis, PERIOD); // no window boundary in the middle of the burst
    const remaining: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await hit(call, t0);
      expect(r.outcome).toBe("allowed");
      remaining.push(r.remaining);
    }
    expect(remaining).toEqual([4, 3, 2, 1, 0]);

    const denied = await hit(call, t0);
    expect(denied).toMatchObject({ allowed: false, outcome: "denied", limit: 5, remaining: 0 });
    expect(denied.retryAfterMs).toBeGreaterThan(1000);
    expect(denied.retryAfterMs).toBeLessThanOrEqual(2 * PERIOD);

    // Clearly before: still denied (and the denial consumed nothing, so the answer is unchanged).
    const early = await hit(call, t0 + denied.retryAfterMs - 1000);
    expect(early.outcome).toBe("denied");
    // At that moment, with the same cost: allowed.
    expect((await hit(call, t0 + denied.retryAfterMs)).outcome).toBe("allowed");
  });

  it("gives the whole limit back after two quiet periods", async () => {
    const call = ruleCall({ algorithm, limit: 3, periodMs: PERIOD });
    for (let i = 0; i < 3; i++) expect((await hit(call)).outcome).toBe("allowed");
    expect((await hit(call)).outcome).toBe("denied");
    const later = 2 * PERIOD + 10;
    const results = [];
    for (let i = 0; i < 4; i++) results.push((await hit(call, later)).outcome);
    expect(results).toEqual(["allowed", "allowed", "allowed", "denied"]);
  });

  it("peeks without consuming", async () => {
    const call = ruleCall({ algorithm, limit: 2, periodMs: PERIOD });
    for (let i = 0; i < 3; i++) {
      const peeked = await hit(call, 0, { peek: true });
      expect(peeked).toMatchObject({ outcome: "allowed", remaining: 2, resetAfterMs: 0 });
    }
    await hit(call);
    expect(await hit(call, 0, { peek: true })).toMatchObject({ outcome: "allowed", remaining: 1 });
  });

  it("applies a per-identity override from its hash, until the override expires", async () => {
    const call = ruleCall({ algorithm, limit: 5, periodMs: PERIOD });
    const key = overrideKey(prefix, call.rule, call.identityHash);
    await redis.hset(key, { limit: 2 });
    const outcomes = [];
    for (let i = 0; i < 3; i++) outcomes.push(await hit(call));
    expect(outcomes.map((r) => [r.outcome, r.limit])).toEqual([
      ["allowed", 2],
      ["allowed", 2],
      ["denied", 2],
    ]);
    // Its TTL set only now: however long the calls above took, the override was there for all of them.
    await redis.pexpire(key, 100);
    await sleep(200);
    const after = await hit(call);
    expect(after.limit).toBe(5);
    // A TAT records time owed, so units spent under the override are re-priced at the rule's own rate
    // (2 units at 30 s each = 5 units at 12 s): only the counting algorithms give "3 left" back here.
    if (algorithm !== "token-bucket" && algorithm !== "gcra") expect(after.outcome).toBe("allowed");
  });

  it("reports a monitor rule that would deny without enforcing or counting it", async () => {
    const call = ruleCall({ algorithm, limit: 1, periodMs: PERIOD, mode: "monitor" });
    expect(await hit(call)).toMatchObject({ allowed: true, outcome: "allowed" });
    for (let i = 0; i < 3; i++) {
      expect(await hit(call)).toMatchObject({ allowed: true, outcome: "denied", remaining: 0 });
    }
  });
});

describe.each(["sliding-window", "sliding-log", "token-bucket", "gcra"] as Algorithm[])(
  "%s cost",
  (algorithm) => {
    it("counts cost units, and denies a cost larger than the rule can ever grant without counting it", async () => {
      const call = ruleCall({ algorithm, limit: 10, periodMs: PERIOD, cost: 4 });
      const t0 = await offsetToWindowStart(redis, PERIOD);
      expect(await hit(call, t0)).toMatchObject({ outcome: "allowed", remaining: 6 });
      expect(await hit(call, t0)).toMatchObject({ outcome: "allowed", remaining: 2 });
      expect(await hit(call, t0)).toMatchObject({ outcome: "denied", remaining: 2 });

      const huge = await hit({ ...call, cost: 11 }, t0);
      expect(huge).toMatchObject({ allowed: false, outcome: "cost-exceeds-capacity", remaining: 2 });
      // No wait lets it in: it says when more quota comes, as a request that fits would (RateLimit's `t`).
      const fits = await hit({ ...call, cost: 1 }, t0, { peek: true });
      expect(Math.abs(huge.retryAfterMs - fits.retryAfterMs)).toBeLessThanOrEqual(100);
      expect(huge.retryAfterMs).toBeGreaterThan(0);
      expect(await hit({ ...call, cost: 2 }, t0)).toMatchObject({ outcome: "allowed", remaining: 0 });

      // A full rule, which only a cost above its capacity is refused by: more comes at no time (t = 0).
      const fresh = { ...call, identityHash: `${call.identityHash}-fresh` };
      expect(await hit({ ...fresh, cost: 11 }, t0)).toMatchObject({
        outcome: "cost-exceeds-capacity",
        remaining: 10,
        retryAfterMs: 0,
      });
    });
  },
);

describe.each([
  ["reading its override", true],
  ["as production calls it, without an override read", false],
])("fixed-window %s (real time: its counter expires on Redis's own clock)", (_, override) => {
  it("admits exactly `limit` per epoch-aligned window; retryAfterMs is the window's end", async () => {
    // Real time (a time offset would take the production call off its fast path): every bound below is on
    // Redis's clock as read around the calls, so a slow machine widens them instead of failing them.
    const periodMs = 2000;
    const call = ruleCall({ algorithm: "fixed-window", limit: 4, periodMs, override });
    // Start just after a window boundary so that the burst fits inside one window.
    await sleep(periodMs - ((await redisNowMs(redis)) % periodMs) + 20);
    const start = await redisNowMs(redis);
    const end = start - (start % periodMs) + periodMs; // the window's end, on Redis's clock
    const outcomes = [];
    for (let i = 0; i < 5; i++) outcomes.push(await hit(call));
    const deniedBy = await redisNowMs(redis);
    expect(deniedBy, "the burst took the whole window").toBeLessThan(end);
    expect(outcomes.map((r) => [r.outcome, r.remaining])).toEqual([
      ["allowed", 3],
      ["allowed", 2],
      ["allowed", 1],
      ["allowed", 0],
      ["denied", 0],
    ]);
    const denied = outcomes[4];
    if (!denied) throw new Error("unreachable");
    // The window's end as seen from the denial, which came between `start` and `deniedBy` (±1 ms of rounding).
    expect(denied.retryAfterMs).toBeGreaterThanOrEqual(end - deniedBy - 1);
    expect(denied.retryAfterMs).toBeLessThanOrEqual(end - start + 1);
    expect(denied.resetAfterMs).toBe(denied.retryAfterMs);

    // Half a second before the end: still denied. (A call that a very slow machine only ran once the window
    // had ended is the next window's first instead, and must find the whole limit.)
    await sleep(end - (await redisNowMs(redis)) - 500);
    const early = await hit(call);
    if (early.outcome !== "denied") {
      expect(await redisNowMs(redis), "allowed before the window's end").toBeGreaterThanOrEqual(end);
      expect(early).toMatchObject({ outcome: "allowed", remaining: 3 });
      return;
    }
    // After the end: the whole limit again.
    await sleep(end - (await redisNowMs(redis)) + 20);
    expect(await hit(call)).toMatchObject({ outcome: "allowed", remaining: 3 });
  });

  it("says when the window ends, on an allowed request too", async () => {
    const periodMs = 3_600_000;
    const call = ruleCall({ algorithm: "fixed-window", limit: 10, periodMs, override });
    for (let i = 0; i < 3; i++) {
      const untilEnd = periodMs - ((await redisNowMs(redis)) % periodMs);
      const r = await hit(call);
      expect(r.outcome).toBe("allowed");
      expect(Math.abs(r.resetAfterMs - untilEnd)).toBeLessThanOrEqual(1000);
      expect(r.retryAfterMs).toBe(r.resetAfterMs);
    }
  });

  it("counts cost and refuses a cost above the limit without counting it", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: 10, periodMs: 3_600_000, cost: 6, override });
    expect(await hit(call)).toMatchObject({ outcome: "allowed", remaining: 4 });
    expect(await hit(call)).toMatchObject({ outcome: "denied", remaining: 4 });
    const huge = await hit({ ...call, cost: 11 });
    expect(huge).toMatchObject({ outcome: "cost-exceeds-capacity", remaining: 4 });
    // More quota comes at the window's end (RateLimit's `t`), though no wait lets this request in.
    expect(huge.retryAfterMs).toBeGreaterThan(0);
    expect(Math.abs(huge.retryAfterMs - huge.resetAfterMs)).toBeLessThanOrEqual(1000);
    expect(await hit({ ...call, cost: 4 })).toMatchObject({ outcome: "allowed", remaining: 0 });
  });

  it("applies an override, and an override of limit 0 blocks the identity", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: 10, periodMs: 3_600_000 });
    const key = overrideKey(prefix, call.rule, call.identityHash);
    await redis.hset(key, { limit: 1 });
    expect(await hit(call)).toMatchObject({ outcome: "allowed", limit: 1 });
    expect(await hit(call)).toMatchObject({ outcome: "denied", limit: 1 });
    await redis.hset(key, { limit: 0 });
    // Blocked: no quota ever comes, and the figures say one full period.
    expect(await hit(call)).toMatchObject({
      outcome: "cost-exceeds-capacity",
      limit: 0,
      retryAfterMs: 3_600_000,
    });
    await redis.del(key);
  });
});

describe("sliding-window", () => {
  it("weighs the previous window by how much of it is still in view", async () => {
    const call = ruleCall({ algorithm: "sliding-window", limit: 10, periodMs: PERIOD });
    const t0 = await offsetToWindowStart(redis, PERIOD, 0);
    for (let i = 0; i < 10; i++) await hit(call, t0);
    // Half-way through the next window, half of the previous 10 still count: 5 more fit, not 6.
    const half = t0 + PERIOD + PERIOD / 2;
    const outcomes = [];
    for (let i = 0; i < 6; i++) outcomes.push((await hit(call, half)).outcome);
    expect(outcomes.filter((o) => o === "allowed")).toHaveLength(5);
    expect(outcomes[5]).toBe("denied");
  });
});

describe("sliding-log", () => {
  it("is exact: a unit leaves the window exactly one period after it was spent", async () => {
    const call = ruleCall({ algorithm: "sliding-log", limit: 5, periodMs: PERIOD });
    for (let i = 0; i < 3; i++) await hit(call, 0);
    for (let i = 0; i < 2; i++) await hit(call, PERIOD / 2);
    expect((await hit(call, PERIOD / 2)).outcome).toBe("denied");
    // One period after the first three: exactly those three are free again.
    const outcomes = [];
    for (let i = 0; i < 4; i++) outcomes.push((await hit(call, PERIOD + 100)).outcome);
    expect(outcomes).toEqual(["allowed", "allowed", "allowed", "denied"]);
  });
});

describe.each(["token-bucket", "gcra"] as Algorithm[])("%s", (algorithm) => {
  it("lets a fresh identity spend `burst` at once, then refills one unit per period/limit", async () => {
    // One unit per 10 s: the real time these calls take (measured on Redis's clock) refills a fraction only.
    const call = ruleCall({ algorithm, limit: 6, periodMs: PERIOD, burst: 3 });
    const start = await redisNowMs(redis);
    const outcomes = [];
    for (let i = 0; i < 4; i++) outcomes.push(await hit(call));
    const elapsed = (await redisNowMs(redis)) - start;
    expect(outcomes.map((r) => r.outcome)).toEqual(["allowed", "allowed", "allowed", "denied"]);
    const denied = outcomes[3];
    // One unit's interval, less what refilled since the bucket was first spent (±1 ms of rounding).
    expect(denied?.retryAfterMs).toBeGreaterThanOrEqual(10_000 - elapsed - 1);
    expect(denied?.retryAfterMs).toBeLessThanOrEqual(10_000);
    // 25 s later: two whole units, not three.
    const later = [];
    for (let i = 0; i < 3; i++) later.push((await hit(call, 25_000)).outcome);
    expect(later).toEqual(["allowed", "allowed", "denied"]);
  });
});

describe("override fields", () => {
  it("take `period` in milliseconds and `burst` on its own, for a token bucket", async () => {
    const call = ruleCall({ algorithm: "token-bucket", limit: 10, periodMs: PERIOD, burst: 10 });
    const key = overrideKey(prefix, call.rule, call.identityHash);
    await redis.hset(key, { period: 1000, burst: 2 }); // 10 per second, 2 at once
    const outcomes = [];
    for (let i = 0; i < 3; i++) outcomes.push(await hit(call));
    expect(outcomes.map((r) => r.outcome)).toEqual(["allowed", "allowed", "denied"]);
    expect(outcomes[2]?.retryAfterMs).toBeLessThanOrEqual(100); // one unit per 100 ms
    expect((await hit(call, 100)).outcome).toBe("allowed");
  });

  it("an override limit without burst sets the burst too", async () => {
    const call = ruleCall({ algorithm: "gcra", limit: 10, periodMs: PERIOD, burst: 10 });
    await redis.hset(overrideKey(prefix, call.rule, call.identityHash), { limit: 3 });
    const outcomes = [];
    for (let i = 0; i < 4; i++) outcomes.push((await hit(call)).outcome);
    expect(outcomes).toEqual(["allowed", "allowed", "allowed", "denied"]);
  });
});

describe("concurrency", () => {
  it("frees a slot on release, and ignores cost", async () => {
    const call = ruleCall({ algorithm: "concurrency", limit: 2, periodMs: PERIOD, cost: 50 });
    const first = requestId();
    expect((await store.decide([call], first)).allowed).toBe(true);
    expect(await hit(call)).toMatchObject({ outcome: "allowed", remaining: 0 });
    expect((await hit(call)).outcome).toBe("denied");
    await store.release(call, first);
    expect(await hit(call)).toMatchObject({ outcome: "allowed", remaining: 0 });
  });
});

describe.each(["fixed-window", "sliding-window", "token-bucket", "gcra"] as Algorithm[])(
  "%s as production calls it (one rule, no override read: the script's fast path)",
  (algorithm) => {
    it("answers exactly as a call that reads the (absent) override", async () => {
      // An hour: no window edge or refilled unit falls between two calls that must answer alike.
      const periodMs = 3_600_000;
      const lean = ruleCall({ algorithm, limit: 5, periodMs, burst: 3, override: false });
      const full = ruleCall({ algorithm, limit: 5, periodMs, burst: 3, override: true });
      for (let i = 0; i < 7; i++) {
        const [a, b] = [await hit(lean), await hit(full)];
        expect([a.allowed, a.outcome, a.limit, a.remaining]).toEqual([
          b.allowed,
          b.outcome,
          b.limit,
          b.remaining,
        ]);
        expect(Math.abs(a.resetAfterMs - b.resetAfterMs)).toBeLessThanOrEqual(1000);
        expect(Math.abs(a.retryAfterMs - b.retryAfterMs)).toBeLessThanOrEqual(1000);
      }
    });
  },
);
