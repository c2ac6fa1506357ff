/**
 * Delay instead of deny, in the script on real Redis: a token-bucket/gcra rule with a delay admits a request
 * over the rate with a reserved slot (distinct, ordered, one interval apart), denies one whose slot is beyond
 * the delay with an honest retry, combines with other rules all-or-nothing, and gives a slot back only while
 * it is the last one reserved.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseRules } from "../../src/config/rules";
import { stateKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import type { RuleCall, RuleResult } from "../../src/engine/types";
import { directRedis, redisNowMs, requestId, ruleCall, testStore, uniquePrefix } from "./lua-support";

let redis: IORedis;
let store: Store;
const prefix = uniquePrefix("delay");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

/** limit 10 per second: one unit every 100 ms. */
const tenPerSecond = (partial: Partial<RuleCall> = {}): RuleCall =>
  ruleCall({ algorithm: "gcra", limit: 10, periodMs: 1000, delayMs: 5000, ...partial });

const only = (results: RuleResult[]): RuleResult => {
  const [result] = results;
  if (!result) throw new Error("no result");
  return result;
};

// The one-rule fast path (a production call) and the general path (forced by a test time offset of 1 ms)
// must reserve alike.
const PATHS = [
  ["gcra", "fast path", {}],
  ["token-bucket", "fast path", {}],
  ["gcra", "general path", { timeOffsetMs: 1 }],
] as const;

describe.each(PATHS)("%s with a delay, %s", (algorithm, _path, opts) => {
  // One unit every 6 s and a delay of 60 s: the seconds these calls take cannot refill a unit, so the
  // outcome is exact: 10 at once (the burst), 10 held for the next 10 slots, 10 denied.
  const slow = () => tenPerSecond({ algorithm, periodMs: 60_000, delayMs: 60_000 });
  const INTERVAL_US = 6_000_000;

  it("gives 30 concurrent requests the burst, then distinct slots one interval apart, then denials", async () => {
    const call = slow();
    const decisions = await Promise.all(
      Array.from({ length: 30 }, () => store.decide([call], requestId(), opts)),
    );
    const results = decisions.map((d) => only(d.results));
    const admitted = decisions.filter((d) => d.allowed).map((d) => only(d.results));
    const delayed = admitted.filter((r) => r.delayMs !== undefined);
    expect(admitted.length - delayed.length).toBe(10);
    expect(delayed).toHaveLength(10);
    // Each delayed request's slot starts where its TAT minus the burst capacity is: exactly one interval apart.
    const slots = delayed.map((r) => (r.reservation?.tatUs ?? 0) - 10 * INTERVAL_US).sort((a, b) => a - b);
    for (let i = 1; i < slots.length; i++) expect((slots[i] ?? 0) - (slots[i - 1] ?? 0)).toBe(INTERVAL_US);
    const waits = delayed.map((r) => r.delayMs ?? 0).sort((a, b) => a - b);
    waits.forEach((wait, k) => {
      // The k-th slot is (k + 1) intervals after the first decision; a few seconds may have passed since.
      expect(wait).toBeLessThanOrEqual((k + 1) * 6000);
      expect(wait).toBeGreaterThan((k + 1) * 6000 - 3000);
    });
    for (const r of delayed)
      expect(r.reservation?.previousTatUs).toBe((r.reservation?.tatUs ?? 0) - INTERVAL_US);
    // Beyond the delay: denied, with a retry for when the request would fit the queue (the next slot frees).
    const denied = results.filter((r) => r.outcome !== "allowed");
    expect(denied).toHaveLength(10);
    for (const r of denied) {
      expect(r.outcome).toBe("denied");
      expect(r.delayMs).toBeUndefined();
      expect(r.retryAfterMs).toBeGreaterThan(6000 - 3000);
      expect(r.retryAfterMs).toBeLessThanOrEqual(6000);
    }
  });
});

describe("several rules with delays", () => {
  it("reports each rule's wait (the Worker waits for the longest) and reserves all of them or none", async () => {
    const fast = tenPerSecond({ rule: "fast" });
    // One unit every 10 s, a delay of two units: the real time these calls take (measured on Redis's clock)
    // is a fraction of a unit, so which of them wait and which are denied does not depend on it.
    const slow = ruleCall({
      algorithm: "token-bucket",
      rule: "slow",
      limit: 2,
      periodMs: 20_000,
      delayMs: 20_000,
    });
    const both = [fast, slow];
    const start = await redisNowMs(redis);
    const first = await store.decide(both, requestId()); // both fresh: nobody waits
    expect(first.results.map((r) => r.delayMs)).toEqual([undefined, undefined]);
    await store.decide(both, requestId());
    const third = await store.decide(both, requestId()); // slow is over its rate: 10 s to its next slot
    const elapsed = (await redisNowMs(redis)) - start;
    expect(third.allowed).toBe(true);
    expect(third.results[0]?.delayMs).toBeUndefined();
    // One interval, less what refilled since the first call (±1 ms of rounding).
    expect(third.results[1]?.delayMs).toBeGreaterThanOrEqual(10_000 - elapsed - 1);
    expect(third.results[1]?.delayMs).toBeLessThanOrEqual(10_000);
    expect(third.results[1]?.reservation).toBeDefined();
    expect(third.results[0]?.reservation).toBeDefined(); // every bucket rule written carries its stamps
    await store.decide(both, requestId()); // slow's slot ~20 s ahead: still within its delay
    const fastTat = await redis.get(stateKey(prefix, "fast", fast.identityHash));
    const denied = await store.decide(both, requestId()); // slow's next slot is beyond its delay
    expect(denied.allowed).toBe(false);
    expect(denied.results[1]?.outcome).toBe("denied");
    // All-or-nothing: the fast rule, which had room, consumed nothing.
    expect(await redis.get(stateKey(prefix, "fast", fast.identityHash))).toBe(fastTat);
  });
});

describe("giving a slot back", () => {
  it("moves the TAT back only for the last reservation", async () => {
    const call = tenPerSecond({ limit: 1, delayMs: 10_000 });
    const key = stateKey(prefix, call.rule, call.identityHash);
    await store.decide([call], requestId()); // the burst of one
    const a = only((await store.decide([call], requestId())).results);
    const b = only((await store.decide([call], requestId())).results);
    expect(a.reservation && b.reservation).toBeTruthy();
    // a is not the last reservation: giving it back would let b's slot leave early.
    await store.release(call, "-", a.reservation);
    expect(await redis.get(key)).toBe(String(b.reservation?.tatUs));
    // b is: the state becomes what it was before b arrived.
    await store.release(call, "-", b.reservation);
    expect(await redis.get(key)).toBe(String(a.reservation?.tatUs));
    expect(await redis.pttl(key)).toBeGreaterThan(0);
  });

  it("gives nothing back once its decision is older than the longest reset fence (30 s)", async () => {
    const call = tenPerSecond({ limit: 1, delayMs: 60_000 });
    const key = stateKey(prefix, call.rule, call.identityHash);
    await store.decide([call], requestId()); // the burst of one
    const { reservation } = only((await store.decide([call], requestId())).results);
    if (!reservation) throw new Error("not held");
    // The same give-back with its decision's time put 31 s back: a reset since would have fenced for 30 s
    // at most, and fresh requests could have rebuilt that very TAT after it.
    const writtenAtUs = reservation.writtenAtUs - 31_000_000;
    await store.release(call, "-", { ...reservation, writtenAtUs });
    expect(await redis.get(key)).toBe(String(reservation.tatUs));
    await store.release(call, "-", reservation);
    expect(await redis.get(key)).toBe(String(reservation.previousTatUs));
  });
});

describe("configuration", () => {
  const parse = (rule: Record<string, unknown>) =>
    parseRules([{ name: "r", key: "ip", limit: 10, period: "1s", ...rule }], {
      label: "RATE_LIMIT_RULES",
      jwtVerifiable: false,
    });

  it("accepts a delay on token-bucket and gcra rules, in ms or seconds", () => {
    expect(parse({ algorithm: "gcra", delay: "5s" })[0]?.delayMs).toBe(5000);
    expect(parse({ algorithm: "token-bucket", delay: "250ms" })[0]?.delayMs).toBe(250);
    expect(parse({ algorithm: "gcra" })[0]?.delayMs).toBe(0);
  });

  it("names the field when a delay is on another algorithm, malformed, negative or too long", () => {
    expect(() => parse({ algorithm: "fixed-window", delay: "5s" })).toThrow(
      /RATE_LIMIT_RULES\[0\]\.delay: only token-bucket and gcra rules can delay a request \(this one is fixed-window\)/,
    );
    expect(() => parse({ algorithm: "gcra", delay: "soon" })).toThrow(/RATE_LIMIT_RULES\[0\]\.delay: "soon"/);
    expect(() => parse({ algorithm: "gcra", delay: "2m" })).toThrow(/\.delay: "2m" is longer than 60s/);
    // A number is whole seconds, so TOML's `delay = -5` arrives as a number: never a negative hold.
    expect(() => parse({ algorithm: "gcra", delay: -5 })).toThrow(/\.delay: -5 is negative/);
  });
});
