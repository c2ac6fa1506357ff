// The resilience building blocks on their own, with a hand-driven clock: breaker timing, the deny
// cache's countdown, bounds and one refresh at a time, the fallback limiter's approximation and bounds.
import { describe, expect, it } from "vitest";
import type { RuleCall, RuleResult } from "../../src/engine/types";
import { CircuitBreaker } from "../../src/resilience/breaker";
import { DENY_CACHE_HOLD_MS, DenyCache, type Refresh } from "../../src/resilience/deny-cache";
import { FallbackLimiter } from "../../src/resilience/fallback";

function clock(startMs = 1_000_000) {
  const c = { ms: startMs, now: () => c.ms };
  return c;
}

const call = (overrides: Partial<RuleCall> = {}): RuleCall => ({
  rule: "r",
  algorithm: "fixed-window",
  limit: 3,
  periodMs: 10_000,
  burst: 3,
  cost: 1,
  mode: "on",
  failure: "open",
  identityHash: "id-1",
  override: false,
  ...overrides,
});

const denial = (c: RuleCall, retryAfterMs: number): RuleResult => ({
  call: c,
  outcome: "denied",
  limit: c.limit,
  periodMs: c.periodMs,
  overridden: false,
  remaining: 0,
  resetAfterMs: retryAfterMs + 1000,
  retryAfterMs,
  source: "redis",
});

/** An allowed rule's figures, as Redis gives them beside another rule's denial (which consumed nothing). */
const figures = (c: RuleCall, remaining: number, retryAfterMs: number): RuleResult => ({
  call: c,
  outcome: "allowed",
  limit: c.limit,
  periodMs: c.periodMs,
  overridden: false,
  remaining,
  resetAfterMs: retryAfterMs + 2000,
  retryAfterMs,
  source: "redis",
});

describe("circuit breaker", () => {
  it("opens after 5 consecutive failures and stays open for 1 s", () => {
    const t = clock();
    const b = new CircuitBreaker({}, t.now);
    for (let i = 0; i < 4; i++) {
      expect(b.admit()).toBe("call");
      expect(b.failure(false)).toBe(false);
    }
    expect(b.state).toBe("closed");
    expect(b.failure(false)).toBe(true);
    expect(b.state).toBe("open");
    expect(b.remainingOpenMs()).toBe(1000);
    expect(b.admit()).toBe("skip");
    t.ms += 999;
    expect(b.admit()).toBe("skip");
    t.ms += 1;
    expect(b.state).toBe("half-open");
  });

  it("lets exactly one probe through when half-open, and closes when it succeeds", () => {
    const t = clock();
    const b = new CircuitBreaker({ failureThreshold: 1 }, t.now);
    b.failure(false);
    t.ms += 1000;
    expect(b.admit()).toBe("probe");
    expect(b.admit()).toBe("skip");
    expect(b.admit()).toBe("skip");
    b.success();
    expect(b.state).toBe("closed");
    expect(b.admit()).toBe("call");
  });

  it("doubles the cool-down after each failed probe, up to 10 s, and resets after a success", () => {
    const t = clock();
    const b = new CircuitBreaker({ failureThreshold: 1 }, t.now);
    b.failure(false);
    const cooldowns: number[] = [b.remainingOpenMs()];
    for (let i = 0; i < 6; i++) {
      t.ms += cooldowns[cooldowns.length - 1] ?? 0;
      expect(b.admit()).toBe("probe");
      b.failure(true);
      cooldowns.push(b.remainingOpenMs());
    }
    expect(cooldowns).toEqual([1000, 2000, 4000, 8000, 10_000, 10_000, 10_000]);
    t.ms += 10_000;
    b.admit();
    b.success();
    expect(b.state).toBe("closed");
    b.failure(false);
    expect(b.remainingOpenMs()).toBe(1000); // the next outage starts again from the shortest cool-down
  });

  it("does not extend the cool-down for late failures of calls admitted before it opened", () => {
    const t = clock();
    const b = new CircuitBreaker({}, t.now);
    for (let i = 0; i < 5; i++) b.failure(false);
    t.ms += 300;
    for (let i = 0; i < 20; i++) expect(b.failure(false)).toBe(false);
    expect(b.remainingOpenMs()).toBe(700);
  });

  it("lets another request probe if the first probe never reports back", () => {
    const t = clock();
    const b = new CircuitBreaker({ failureThreshold: 1, probeLeaseMs: 500 }, t.now);
    b.failure(false);
    t.ms += 1000;
    expect(b.admit()).toBe("probe");
    t.ms += 499;
    expect(b.admit()).toBe("skip");
    t.ms += 1;
    expect(b.admit()).toBe("probe");
  });
});

describe("deny cache", () => {
  it("answers a denied identity until its retryAfter, counting the times down", () => {
    const t = clock();
    const cache = new DenyCache(100, t.now);
    cache.remember([denial(call(), 800)]);
    t.ms += 300;
    const hit = cache.lookup(call());
    expect(hit).toMatchObject({
      outcome: "denied",
      retryAfterMs: 500,
      resetAfterMs: 1500,
      source: "deny-cache",
    });
    expect(hit?.reason).toBe("deny_cache");
    t.ms += 500;
    expect(cache.lookup(call())).toBeUndefined();
    // Kept for the request that asks Redis again; gone once that call's answer is in.
    expect(cache.size).toBe(1);
    const refresh = cache.refreshBy([call()], t.ms + 250);
    expect(refresh).toBeDefined();
    cache.settle(refresh as Refresh, "answered");
    expect(cache.size).toBe(0);
  });

  it("lets one request ask Redis about an expired denial; the ones it would have answered wait for it", async () => {
    const t = clock();
    const cache = new DenyCache(100, t.now);
    cache.remember([denial(call({ cost: 2 }), 3_600_000)]);
    expect(cache.refreshing([call({ cost: 2 })])).toBeUndefined(); // live: nothing to refresh
    expect(cache.refreshBy([call({ cost: 2 })], t.ms + 250)).toBeUndefined();
    t.ms += DENY_CACHE_HOLD_MS;

    expect(cache.refreshing([call({ cost: 2 })])).toBeUndefined(); // expired, nobody asking yet
    const refresh = cache.refreshBy([call({ cost: 2 })], t.ms + 250) as Refresh;
    expect(refresh).toBeDefined();
    // Others the denial would have answered wait for it; a smaller cost, another limit or rule would not have
    // been answered by it, and ask Redis as always.
    expect(cache.refreshing([call({ cost: 3 })])).toBe(refresh);
    expect(cache.refreshing([call({ rule: "other" }), call({ cost: 2 })])).toBe(refresh);
    expect(cache.refreshing([call({ cost: 1 })])).toBeUndefined();
    expect(cache.refreshing([call({ cost: 2, limit: 4 })])).toBeUndefined();
    expect(cache.refreshBy([call({ cost: 2 })], t.ms + 250)).toBeUndefined(); // one at a time

    // Redis denied again: its new denial answers the waiters, and the refresh's end leaves it in place.
    cache.remember([denial(call({ cost: 2 }), 3_600_000)]);
    cache.settle(refresh, "answered");
    expect(await refresh.landed).toBe("answered");
    expect(cache.lookup(call({ cost: 2 }))).toMatchObject({ outcome: "denied", source: "deny-cache" });
    expect(cache.refreshing([call({ cost: 2 })])).toBeUndefined();
  });

  it("drops an expired denial whose refresh failed or let its request through, and retakes a lost one", async () => {
    const t = clock();
    const cache = new DenyCache(100, t.now);
    cache.remember([denial(call(), 3_600_000)]);
    t.ms += DENY_CACHE_HOLD_MS;
    const failed = cache.refreshBy([call()], t.ms + 250) as Refresh;
    cache.settle(failed, "timeout");
    expect(await failed.landed).toBe("timeout");
    expect(cache.size).toBe(0); // the failure policy decides until Redis answers

    cache.remember([denial(call(), 3_600_000)]);
    t.ms += DENY_CACHE_HOLD_MS;
    const lost = cache.refreshBy([call()], t.ms + 250) as Refresh;
    t.ms += 250; // its request's context is gone: nobody waits for it, the next request asks again
    expect(cache.refreshing([call()])).toBeUndefined();
    const again = cache.refreshBy([call()], t.ms + 250) as Refresh;
    expect(again).not.toBe(lost);
    cache.settle(lost, "answered"); // landing late, it does not drop what `again` is asking about
    expect(cache.refreshing([call()])).toBe(again);
    cache.settle(again, "answered"); // Redis let it through: no denial left
    expect(cache.size).toBe(0);
  });

  it("asks Redis again after a second however long the denial, as units may come back sooner", () => {
    const t = clock();
    const cache = new DenyCache(100, t.now);
    cache.remember([denial(call(), 3_600_000)]);
    t.ms += DENY_CACHE_HOLD_MS - 1;
    // Redis's own figures, counted down: the client is still told the truth Redis told.
    expect(cache.lookup(call())).toMatchObject({
      outcome: "denied",
      retryAfterMs: 3_600_000 - (DENY_CACHE_HOLD_MS - 1),
    });
    t.ms += 1;
    expect(cache.lookup(call())).toBeUndefined();
  });

  it("gives a larger cost a bucket's wait in the script's own whole µs per unit, never a ms short", () => {
    const cache = new DenyCache(100, clock().now);
    // 3 a second: 333,334 µs a unit as the script rounds it; three more units are 1,000,002 µs, so 1,001 ms.
    const bucket = (cost: number) =>
      call({ algorithm: "token-bucket", limit: 3, periodMs: 1000, burst: 10, cost });
    cache.remember([denial(bucket(1), 500)]);
    expect(cache.lookup(bucket(4))?.retryAfterMs).toBe(500 + 1001);
  });

  it("keeps identities and rules apart, and lets a cheaper request, or one above capacity, ask Redis", () => {
    const cache = new DenyCache(100, clock().now);
    const of = (fields: Partial<RuleCall>) => call({ limit: 10, burst: 10, ...fields });
    cache.remember([denial(of({ cost: 5 }), 4000)]);
    expect(cache.lookup(of({ cost: 5 }))).toBeDefined();
    expect(cache.lookup(of({ cost: 9 }))).toBeDefined();
    expect(cache.lookup(of({ cost: 1 }))).toBeUndefined();
    expect(cache.lookup(of({ cost: 11 }))).toBeUndefined(); // more than ever fits: Redis says so
    expect(cache.lookup(of({ cost: 5, identityHash: "id-2" }))).toBeUndefined();
    expect(cache.lookup(of({ cost: 5, rule: "other" }))).toBeUndefined();
  });

  it("never caches monitor rules, concurrency rules, a lease renewal's denial or allowed results", () => {
    const cache = new DenyCache(100, clock().now);
    cache.remember([denial(call({ mode: "monitor" }), 4000)]);
    // A renewal (cost 0) is no request: its shorter wait would answer cost-1 requests too early.
    cache.remember([denial(call({ cost: 0 }), 50)]);
    cache.remember([denial(call({ algorithm: "concurrency" }), 1000)]);
    cache.remember([{ ...denial(call(), 4000), outcome: "allowed" }]);
    cache.remember([{ ...denial(call(), 4000), outcome: "cost-exceeds-capacity" }]);
    expect(cache.size).toBe(0);
  });

  it("never caches a denial under an override's limits, which a ttl may end before the retry time", () => {
    const cache = new DenyCache(100, clock().now);
    // The reply says an override applied: with another limit, or with the rule's very own figures.
    cache.remember([{ ...denial(call({ override: true }), 4000), limit: 1, overridden: true }]);
    cache.remember([{ ...denial(call({ override: undefined }), 4000), overridden: true }]);
    cache.remember([
      { ...denial(call({ algorithm: "token-bucket", override: true }), 4000), overridden: true },
    ]);
    expect(cache.size).toBe(0);
  });

  it("caches a denial read with an override that did not apply (the override index did not know)", () => {
    const cache = new DenyCache(100, clock().now);
    cache.remember([denial(call({ override: true }), 4000)]);
    expect(cache.lookup(call({ override: true }))).toMatchObject({ outcome: "denied", source: "deny-cache" });
    // A bucket's too: the reply says whether an override set its burst.
    const bucket = call({ rule: "tb", algorithm: "token-bucket", override: true });
    cache.remember([denial(bucket, 4000)]);
    expect(cache.lookup(bucket)).toMatchObject({ outcome: "denied", source: "deny-cache" });
  });

  it("keeps the figures Redis gave the request's other rules beside its denial, as long, times counted down", () => {
    const t = clock();
    const cache = new DenyCache(100, t.now);
    const other = call({ rule: "other", limit: 10 });
    cache.remember([figures(other, 7, 400), denial(call(), 900)]);
    // Figures answer no request on their own: one matching only their rule asks Redis.
    expect(cache.lookup(other)).toBeUndefined();
    t.ms += 600;
    const kept = cache.figures(other);
    expect(kept).toMatchObject({ outcome: "allowed", limit: 10, remaining: 7, source: "deny-cache" });
    expect(kept).toMatchObject({ resetAfterMs: 1800, retryAfterMs: 0, reason: "deny_cache" });
    // Only for the same rule, identity, limit and cost.
    expect(cache.figures({ ...other, limit: 11 })).toBeUndefined();
    expect(cache.figures({ ...other, cost: 2 })).toBeUndefined();
    expect(cache.figures({ ...other, identityHash: "id-2" })).toBeUndefined();
    t.ms += 300; // the denial's retry time: its figures go with it
    expect(cache.figures(other)).toBeUndefined();
  });

  it("keeps no figures beside no cached denial, nor a slot-holding rule's or one under an override's limits", () => {
    const cache = new DenyCache(100, clock().now);
    cache.remember([figures(call({ rule: "a" }), 2, 1000), denial(call({ mode: "monitor" }), 4000)]);
    expect(cache.size).toBe(0);
    const slot = call({ rule: "slot", algorithm: "concurrency" });
    const overridden = call({ rule: "overridden", override: true });
    cache.remember([
      figures(slot, 1, 0),
      { ...figures(overridden, 2, 1000), limit: 5, overridden: true },
      denial(call(), 4000),
    ]);
    expect(cache.size).toBe(1);
    expect(cache.figures(slot)).toBeUndefined();
    expect(cache.figures(overridden)).toBeUndefined();
  });

  it("drops a rule's older figures when a newer denied decision has none to keep for it", () => {
    const cache = new DenyCache(100, clock().now);
    const other = call({ rule: "other", limit: 10 });
    cache.remember([figures(other, 7, 1000), denial(call(), 4000)]);
    expect(cache.figures(other)).toBeDefined();
    // Now a monitor rule Redis would have denied: nothing to keep, and the older figures are no longer true.
    cache.remember([denial({ ...other, mode: "monitor" }, 2000), denial(call(), 4000)]);
    expect(cache.figures(other)).toBeUndefined();
  });

  it("drops a rule's older figures when a newer denied decision keeps no denial at all", () => {
    const cache = new DenyCache(100, clock().now);
    const other = call({ rule: "other", limit: 10 });
    cache.remember([figures(other, 7, 1000), denial(call(), 4000)]);
    // Denied by a concurrency rule (never cached): Redis has answered for `other` since, with 3 left.
    cache.remember([
      figures(other, 3, 1000),
      denial(call({ rule: "slots", algorithm: "concurrency" }), 1000),
    ]);
    expect(cache.figures(other)).toBeUndefined();
  });

  it("holds at most its bound, dropping the oldest identity first", () => {
    const cache = new DenyCache(3, clock().now);
    for (let i = 0; i < 10; i++) cache.remember([denial(call({ identityHash: `id-${i}` }), 4000)]);
    expect(cache.size).toBe(3);
    expect(cache.lookup(call({ identityHash: "id-6" }))).toBeUndefined();
    expect(cache.lookup(call({ identityHash: "id-9" }))).toBeDefined();
  });

  it("forgets an identity on request", () => {
    const cache = new DenyCache(10, clock().now);
    cache.remember([denial(call(), 4000)]);
    cache.forget("r", "id-1");
    expect(cache.lookup(call())).toBeUndefined();
  });
});

describe("fallback limiter (approximate, per isolate)", () => {
  it("admits `limit` units per window and denies the rest until the window ends", () => {
    const t = clock(1_000_000); // a multiple of the 10 s period: a window starts here
    const f = new FallbackLimiter(100, t.now);
    const outcomes: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = f.judge(call());
      if (r.outcome === "allowed") f.commit(call(), `q${i}`);
      outcomes.push(r.outcome);
    }
    expect(outcomes).toEqual(["allowed", "allowed", "allowed", "denied", "denied"]);
    t.ms += 4000;
    expect(f.judge(call())).toMatchObject({ outcome: "denied", retryAfterMs: 6000, remaining: 0 });
    t.ms += 6000;
    expect(f.judge(call()).outcome).toBe("allowed");
  });

  it("counts cost units and says when a cost can never fit", () => {
    const f = new FallbackLimiter(100, clock().now);
    expect(f.judge(call({ cost: 2 }))).toMatchObject({ outcome: "allowed", remaining: 1 });
    f.commit(call({ cost: 2 }), "q");
    expect(f.judge(call({ cost: 2 })).outcome).toBe("denied");
    expect(f.judge(call({ cost: 4 })).outcome).toBe("cost-exceeds-capacity");
  });

  /** Redis's answer to `c`: allowed with `remaining` left, whole again in `resetAfterMs`. */
  const answered = (c: RuleCall, remaining: number, resetAfterMs: number): RuleResult => ({
    ...figures(c, remaining, 0),
    resetAfterMs,
  });

  it("starts from what Redis last said: its remaining, then the whole limit once Redis said it would be whole", () => {
    const t = clock();
    const f = new FallbackLimiter(100, t.now);
    const c = call({ limit: 10, burst: 10 });
    const sent = f.sent([c]);
    f.heard([answered(c, 2, 5000)], sent);
    const outcomes: string[] = [];
    for (let i = 0; i < 4; i++) {
      const r = f.judge(c);
      if (r.outcome === "allowed") f.commit(c, `q${i}`);
      outcomes.push(r.outcome);
    }
    expect(outcomes).toEqual(["allowed", "allowed", "denied", "denied"]);
    expect(f.judge(c)).toMatchObject({ remaining: 0, retryAfterMs: 5000 });
    t.ms += 5000;
    expect(f.judge(c)).toMatchObject({ outcome: "allowed", remaining: 9 });
  });

  it("admits nothing for an identity Redis denied, until the denial is over", () => {
    const t = clock();
    const f = new FallbackLimiter(100, t.now);
    const c = call();
    f.heard([denial(c, 4000)], f.sent([c]));
    expect(f.judge(c)).toMatchObject({ outcome: "denied", remaining: 0 });
    t.ms += 5000; // denial's reset: 4000 + 1000
    expect(f.judge(c).outcome).toBe("allowed");
  });

  it("refills a bucket Redis emptied at its rate", () => {
    const t = clock();
    const f = new FallbackLimiter(100, t.now);
    const c = call({ algorithm: "gcra", limit: 10, burst: 10 }); // one unit a second
    f.heard([{ ...denial(c, 1000), resetAfterMs: 10_000 }], f.sent([c]));
    expect(f.judge(c).outcome).toBe("denied");
    t.ms += 1000;
    expect(f.judge(c)).toMatchObject({ outcome: "allowed", remaining: 0 });
  });

  it("takes away the units of calls never answered (for a request whose own call was not, those sent before it)", () => {
    const t = clock();
    const f = new FallbackLimiter(100, t.now);
    const c = call({ limit: 10, burst: 10 });
    f.heard([answered(c, 4, 5000)], f.sent([c]));
    const lost = f.sent([c]); // timed out: Redis may have counted it
    const leaseCall = f.sent([c], [2]); // a lease call for 2 units, timed out too
    expect(f.judge(c)).toMatchObject({ outcome: "allowed", remaining: 0 }); // 4 - 1 - 2 = 1 left
    // A request whose own call timed out: Redis took the calls sent before it first, and admitting it stands
    // for its own.
    expect(f.judge(c, false, lost[0])).toMatchObject({ outcome: "allowed", remaining: 3 });
    expect(f.judge(c, false, leaseCall[0])).toMatchObject({ outcome: "allowed", remaining: 2 });
    f.commit(c, "own", lost[0]);
    expect(f.judge(c)).toMatchObject({ outcome: "allowed", remaining: 0 });
    // A later answer covers what was sent before its call.
    t.ms += 1;
    const later = f.sent([c]);
    f.heard([answered(c, 3, 5000)], later);
    expect(f.judge(c)).toMatchObject({ outcome: "allowed", remaining: 1 }); // 3 - the one admitted here - 1
  });

  it("admits only its share of the limit while Redis is slow", () => {
    const f = new FallbackLimiter(100, clock().now);
    const c = call({ limit: 50, burst: 50 });
    const outcomes = Array.from({ length: 7 }, (_, i) => {
      const r = f.judge(c, true);
      if (r.outcome === "allowed") f.commit(c, `q${i}`);
      return r.outcome;
    });
    expect(outcomes).toEqual([...Array(5).fill("allowed"), "denied", "denied"]);
  });

  it("keeps a concurrency rule's requests in flight here within its slots, and frees them on release", () => {
    const f = new FallbackLimiter(100, clock().now);
    const c = call({ algorithm: "concurrency", limit: 2 });
    for (const id of ["a", "b"]) {
      expect(f.judge(c).outcome).toBe("allowed");
      f.commit(c, id);
    }
    expect(f.judge(c)).toMatchObject({ outcome: "denied", remaining: 0 });
    f.release(c, "a");
    expect(f.judge(c).outcome).toBe("allowed");
    // While Redis is slow: its share, one slot.
    f.release(c, "b");
    f.commit(c, "c");
    expect(f.judge(c, true).outcome).toBe("denied");
  });

  it("holds at most its bound of windows", () => {
    const f = new FallbackLimiter(50, clock().now);
    for (let i = 0; i < 1000; i++) f.commit(call({ identityHash: `id-${i}` }), "q");
    expect(f.size).toBe(50);
  });
});
