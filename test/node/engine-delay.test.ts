/**
 * Delay instead of deny, in the script on real Redis: a token-bucket/gcra rule with a delay admits a request
 * over the rate with a reserved slot (distinct, ordered, one interval apart), denies one whose slot is beyond
 * the delay with an honest retry, combines with other rules all-or-nothing, and gives a slot back only while
 * it is the last one reserved.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { stateKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import type { RuleCall, RuleResult } from "../../src/engine/types";
import { parseRules } from "../../src/config/rules";
import { directRedis, requestId, ruleCall, testStore, uniquePrefix } from "./lua-support";

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
  it("gives 50 concurrent requests distinct slots one interval apart after the burst, and denies none", async () => {
    const call = tenPerSecond({ algorithm });
    const decisions = await Promise.all(
      Array.from({ length: 50 }, () => store.decide([call], requestId(), opts)),
    );
    expect(decisions.every((d) => d.allowed)).toBe(true);
    const results = decisions.map((d) => only(d.results));
    const delayed = results.filter((r) => r.delayMs !== undefined);
    expect(results.length - delayed.length).toBe(10); // the burst leaves at once
    expect(delayed).toHaveLength(40);
    // Each delayed request's slot starts where its TAT minus the burst capacity is: exactly 100 ms apart.
    const slots = delayed.map((r) => (r.reservation?.tatUs ?? 0) - 10 * 100_000).sort((a, b) => a - b);
    for (let i = 1; i < slots.length; i++) expect((slots[i] ?? 0) - (slots[i - 1] ?? 0)).toBe(100_000);
    for (const r of delayed) {
      expect(r.delayMs).toBeGreaterThan(0);
      expect(r.delayMs).toBeLessThanOrEqual(5000);
      expect(r.reservation?.previousTatUs).toBe((r.reservation?.tatUs ?? 0) - 100_000);
    }
    // The waits are ordered like the slots (all decided within moments of each other).
    const waits = delayed.map((r) => r.delayMs ?? 0).sort((a, b) => a - b);
    expect((waits.at(-1) ?? 0) - (waits[0] ?? 0)).toBeGreaterThanOrEqual(3900 - 1000);
  });

  it("denies a request whose slot is beyond the delay, with a retry for when it would fit the queue", async () => {
    const call = tenPerSecond({ algorithm, delayMs: 1000 });
    const results: { allowed: boolean; result: RuleResult }[] = [];
    for (let i = 0; i < 25; i++) {
      const d = await store.decide([call], requestId(), opts);
      results.push({ allowed: d.allowed, result: only(d.results) });
    }
    const admitted = results.filter((r) => r.allowed);
    // 10 at once + 10 delayed (slots 100..1000 ms ahead); sequential calls let a few ms pass, so one more
    // slot may come within the delay.
    expect(admitted.length).toBeGreaterThanOrEqual(20);
    expect(admitted.length).toBeLessThanOrEqual(21);
    const denied = results.filter((r) => !r.allowed);
    for (const { result } of denied) {
      expect(result.outcome).toBe("denied");
      expect(result.delayMs).toBeUndefined();
      expect(result.retryAfterMs).toBeGreaterThan(0);
      expect(result.retryAfterMs).toBeLessThanOrEqual(100);
    }
  });
});

describe("several rules with delays", () => {
  it("reports each rule's wait (the Worker waits for the longest) and reserves all of them or none", async () => {
    const fast = tenPerSecond({ rule: "fast" });
    const slow = ruleCall({
      algorithm: "token-bucket",
      rule: "slow",
      limit: 2,
      periodMs: 1000,
      delayMs: 1000,
    });
    const both = [fast, slow];
    const first = await store.decide(both, requestId()); // both fresh: nobody waits
    expect(first.results.map((r) => r.delayMs)).toEqual([undefined, undefined]);
    await store.decide(both, requestId());
    const third = await store.decide(both, requestId()); // slow is over its rate: 500 ms to its next slot
    expect(third.allowed).toBe(true);
    expect(third.results[0]?.delayMs).toBeUndefined();
    expect(third.results[1]?.delayMs).toBeGreaterThan(400);
    expect(third.results[1]?.reservation).toBeDefined();
    expect(third.results[0]?.reservation).toBeDefined(); // every bucket rule written carries its stamps
    await store.decide(both, requestId()); // slow's slot ~1000 ms ahead: still within its delay
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

  it("names the field when a delay is on another algorithm, malformed or too long", () => {
    expect(() => parse({ algorithm: "fixed-window", delay: "5s" })).toThrow(
      /RATE_LIMIT_RULES\[0\]\.delay: only token-bucket and gcra rules can delay a request \(this one is fixed-window\)/,
    );
    expect(() => parse({ algorithm: "gcra", delay: "soon" })).toThrow(/RATE_LIMIT_RULES\[0\]\.delay: "soon"/);
    expect(() => parse({ algorithm: "gcra", delay: "2m" })).toThrow(/\.delay: "2m" is longer than 60s/);
  });
});
