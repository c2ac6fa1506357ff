/**
 * A refund (a lease's return, a split decision undone) after an override changed the period or ended by its
 * ttl, on real Redis through the local REST server: it is priced at the limits the units were taken under
 * (`refundOf`, src/engine/results.ts), and gives nothing back into state that did not count them
 * (docs/script.md, "Returned units"). Fixed windows run in real time: their counters expire on
 * Redis's own clock.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { fenceMsOf, fenceReturns, raiseFence } from "../../src/admin/fence";
import { traitsOf } from "../../src/engine/algorithms";
import { DEFAULTS } from "../../src/engine/defaults";
import { consumedCalls } from "../../src/engine/groups";
import { overrideKey, resetFenceKey, stateKey } from "../../src/engine/keys";
import { refundOf } from "../../src/engine/results";
import { reaimArguments } from "../../src/engine/script";
import type { Store } from "../../src/engine/store";
import type { Decision, LeaseGrant, RuleCall, RuleResult } from "../../src/engine/types";
import { giveBack as giveBackHeld } from "../../src/middleware/delay";
import { EndpointDecider } from "../../src/resilience/decider";
import { awayFromWindowEdge } from "../support/window-edge";
import { directRedis, redisNowMs, requestId, ruleCall, sleep, testStore, uniquePrefix } from "./lua-support";

let redis: IORedis;
let store: Store;
const prefix = uniquePrefix("refund-period");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

const SHORT_MS = 2000;
const HOUR_MS = 3_600_000;
const LIMIT = 10;

// Every test tells an hour's window from a 2 s one, and takes up to a few seconds: not near an hour's end.
beforeEach(() => awayFromWindowEdge(HOUR_MS, 20_000, () => redisNowMs(redis)));

type Leased = { result: RuleResult; grant: LeaseGrant };

const counterOf = (call: RuleCall) => stateKey(prefix, call.rule, call.identityHash);
const overrideOf = (call: RuleCall) => overrideKey(prefix, call.rule, call.identityHash);

/** The admin API's step after an override set or removal (src/admin/reaim.ts). */
async function reaim(call: RuleCall, periodMs: number): Promise<number> {
  const { script, keys, args } = reaimArguments(prefix, call.rule, call.identityHash, periodMs);
  return Number(await store.redis.runScript(script, keys, args));
}

/** An override set or removed as the admin API does it (src/admin/routes-overrides.ts), period in ms or none. */
async function changeOverride(call: RuleCall, periodMs: number | undefined): Promise<void> {
  const target = { prefix, rule: call.rule, identityHash: call.identityHash };
  const setting = periodMs === undefined ? undefined : { limit: LIMIT, periodMs, burst: LIMIT };
  await fenceReturns(target, call.algorithm, [call], setting, store.redis);
  if (periodMs === undefined) await redis.del(overrideOf(call));
  else await redis.hset(overrideOf(call), { limit: LIMIT, period: periodMs });
  if (call.algorithm === "fixed-window") await reaim(call, periodMs ?? call.periodMs);
}

/**
 * An override the way the admin API stores it with a `ttl` (src/admin/overrides.ts): its hash fields (`period`
 * in ms, `burst` absent = the override's limit), the ttl in ms.
 */
async function overrideFor(
  call: RuleCall,
  fields: { limit: number; period?: number; burst?: number },
  ttlMs: number,
): Promise<void> {
  await redis.multi().hset(overrideOf(call), fields).pexpire(overrideOf(call), ttlMs).exec();
}

/**
 * An admin reset (src/admin/routes-keys.ts): a fence for the limits the config knows now (`call`'s, or
 * `configured` after a deploy changed them), and the delete, in one script call.
 */
async function reset(call: RuleCall, configured: RuleCall = call): Promise<void> {
  const target = { prefix, rule: call.rule, identityHash: call.identityHash };
  const fenceMs = await fenceMsOf(target, call.algorithm, [configured], store.redis);
  const stateKeys = [counterOf(call)];
  await raiseFence(target, fenceMs, store.redis, undefined, {
    stateKeys,
    bucket: traitsOf(call.algorithm).shape === "bucket",
  });
}

/** Waits until Redis's clock is within the first `withinMs` of a window of `periodMs`. */
async function windowJustBegun(periodMs: number, withinMs: number): Promise<void> {
  for (;;) {
    const into = (await redisNowMs(redis)) % periodMs;
    if (into < withinMs) return;
    await sleep(Math.max(1, periodMs - into));
  }
}

/** Waits until the identity's counter has expired (a window of the period it was aimed at has ended). */
async function untilExpired(call: RuleCall): Promise<void> {
  while ((await redis.pttl(counterOf(call))) !== -2) await sleep(20);
}

/** Waits until the identity's override has ended by its ttl. */
async function untilOverrideEnded(call: RuleCall): Promise<void> {
  while ((await redis.exists(overrideOf(call))) === 1) await sleep(20);
}

/** A lease of 5 units (half the limit) for one request's cost of 1: 4 left unspent. */
async function leased(call: RuleCall, id: string): Promise<Leased> {
  const result = (await store.decide([call], id, { lease: { units: [LIMIT], maxMs: 1000 } })).results[0];
  if (!result?.lease) throw new Error("no lease");
  expect(result.lease.units).toBe(LIMIT / 2);
  return { result, grant: result.lease };
}

/** The return of the lease's 4 unspent units, as src/leases/returns.ts sends it (a bucket's `when`: its TAT). */
const giveBack = (id: string, { result, grant }: Leased) =>
  store.refund([refundOf(result, 4)], id, grant.tatUs || grant.whenUs);

/** Whether `cost` more units are admitted now. */
const admits = async (call: RuleCall, cost: number) =>
  (await store.decide([{ ...call, cost }], requestId())).allowed;

/**
 * The counter in force filled to the limit, then the refund (`giveBackNow`): nothing comes back, and nothing
 * more is admitted.
 */
async function expectNothingBack(call: RuleCall, giveBackNow: () => Promise<number[]>): Promise<void> {
  expect(await admits(call, LIMIT)).toBe(true);
  expect(await giveBackNow()).toEqual([0]);
  expect(await admits(call, 1)).toBe(false);
}

describe("a fixed-window lease returned after an override changed the period", () => {
  it("taken under an hour's override, removed and re-aimed at 2 s: nothing lands in the next 2 s counter", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: SHORT_MS, override: true });
    await redis.hset(overrideOf(call), { limit: LIMIT, period: HOUR_MS });
    const id = requestId();
    const lease = await leased(call, id);
    expect(lease.grant.periodMs).toBe(HOUR_MS);
    await redis.del(overrideOf(call));
    expect(await reaim(call, SHORT_MS)).toBe(1);

    // The next 2 s window: a counter of its own, filled to the limit.
    await untilExpired(call);
    const plain = { ...call, override: false };
    await expectNothingBack(plain, () => giveBack(id, lease));
  });

  it("taken under the rule's hour, an override of 2 s set since: nothing lands in the override's next counter", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: HOUR_MS, override: true });
    const id = requestId();
    const lease = await leased(call, id);
    expect(lease.grant.periodMs).toBe(HOUR_MS);
    await redis.hset(overrideOf(call), { limit: LIMIT, period: SHORT_MS });
    expect(await reaim(call, SHORT_MS)).toBe(1);

    await untilExpired(call);
    await expectNothingBack(call, () => giveBack(id, lease));
  });

  it("the counter that counted the units still takes them back, the override's period still in force", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: SHORT_MS, override: true });
    await redis.hset(overrideOf(call), { limit: LIMIT, period: HOUR_MS });
    const id = requestId();
    const lease = await leased(call, id);
    expect(await giveBack(id, lease)).toEqual([4]);
    expect(await redis.get(counterOf(call))).toBe("1");
  });
});

describe("a lease returned after the period changed and changed back", () => {
  it("fixed-window: an hour, 2 s for one window, an hour again: the hour's new counter gets nothing", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: HOUR_MS, override: true });
    const id = requestId();
    const lease = await leased(call, id);
    await changeOverride(call, SHORT_MS);
    await untilExpired(call);
    // A counter of the override's 2 s window, then aimed at the hour's end once the override goes: it ends
    // where the lease's window ends, though it never counted the lease.
    expect(await admits(call, LIMIT)).toBe(true);
    await changeOverride(call, undefined);
    const ttl = await redis.pttl(counterOf(call));
    expect(Math.abs(ttl - (HOUR_MS - ((await redisNowMs(redis)) % HOUR_MS)))).toBeLessThanOrEqual(1000);
    expect(await giveBack(id, lease)).toEqual([0]);
    expect(await admits(call, 1)).toBe(false);
  });

  it("sliding-window: an hour, 2 s, an hour again: the hour's rewritten state gets nothing", async () => {
    const call = ruleCall({ algorithm: "sliding-window", limit: LIMIT, periodMs: HOUR_MS, override: true });
    const id = requestId();
    const lease = await leased(call, id);
    await changeOverride(call, SHORT_MS);
    expect(await admits(call, 1)).toBe(true); // the state, rewritten under 2 s windows
    await changeOverride(call, undefined);
    // Rewritten under the hour again, in the lease's window: it counts only what came since, filled here.
    await expectNothingBack(call, () => giveBack(id, lease));
  });
});

describe("a fixed-window lease taken under an override that ends by its ttl (no admin call then)", () => {
  const RULE_MS = 1000;
  const OVERRIDE_MS = 4000;

  /** A lease taken early in a 4 s window, under an override of 4 s that lives 600 ms; the override gone. */
  async function leasedUnderEndingOverride(call: RuleCall, id: string): Promise<Leased> {
    await windowJustBegun(OVERRIDE_MS, 200);
    await overrideFor(call, { limit: LIMIT, period: OVERRIDE_MS }, 600);
    const lease = await leased(call, id);
    expect(lease.result.overridden).toBe(true);
    expect(lease.grant.periodMs).toBe(OVERRIDE_MS);
    await untilOverrideEnded(call);
    return lease;
  }

  /** Waits for the rule's last 1 s window inside the override's 4 s one: a counter made there ends with it. */
  async function lastRuleWindow(): Promise<void> {
    while ((await redisNowMs(redis)) % OVERRIDE_MS < OVERRIDE_MS - RULE_MS + 50) await sleep(20);
  }

  /**
   * The lease's return, which must land in the lease's own window (a loaded machine could miss it, and a
   * return in the next window gives nothing whatever the fix).
   */
  async function giveBackInWindow(id: string, lease: Leased): Promise<number[]> {
    const given = await giveBack(id, lease);
    const window = (ms: number) => Math.floor(ms / OVERRIDE_MS);
    expect(window(await redisNowMs(redis))).toBe(window(lease.grant.whenUs / 1000));
    return given;
  }

  it("re-aimed by a decision at the rule's window: the rule's last window inside the override's gets nothing", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: RULE_MS, override: true });
    const id = requestId();
    const lease = await leasedUnderEndingOverride(call, id);
    expect(await admits(call, 1)).toBe(true); // no override read now: the counter is re-aimed at 1 s windows
    await lastRuleWindow();
    // A counter of its own, ending where the lease's window ends, filled to the limit.
    await expectNothingBack(call, () => giveBackInWindow(id, lease));
  });

  it("reset after it ended (a fence for the rule's limits alone): once that fence falls, still nothing", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: RULE_MS, override: true });
    const id = requestId();
    const lease = await leasedUnderEndingOverride(call, id);
    await reset(call);
    await lastRuleWindow();
    expect(await redis.exists(resetFenceKey(prefix, call.rule, call.identityHash))).toBe(0);
    await expectNothingBack(call, () => giveBackInWindow(id, lease));
  });

  it("set again by the admin API with the same limits: the set's fence, sized for them, stops the return", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: RULE_MS, override: true });
    const id = requestId();
    const lease = await leasedUnderEndingOverride(call, id);
    expect(await admits(call, 1)).toBe(true); // re-aimed at the rule's 1 s window, which ends first
    await untilExpired(call);
    await changeOverride(call, OVERRIDE_MS);
    // Past a fence the rule's limits alone would size (1 s), still inside the lease's window.
    await lastRuleWindow();
    // The set override's counter, ending where the lease's window ends, never counted the lease.
    await expectNothingBack(call, () => giveBackInWindow(id, lease));
  });
});

describe("units taken under an override that ends by its ttl, where no counter can be mistaken for theirs", () => {
  it("fixed-window, the override without a period of its own: the counter that counted the lease takes it back", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: HOUR_MS, override: true });
    await overrideFor(call, { limit: 2 * LIMIT }, 600);
    const id = requestId();
    const result = (await store.decide([call], id, { lease: { units: [LIMIT], maxMs: 1000 } })).results[0];
    if (!result?.lease) throw new Error("no lease");
    expect(result.overridden).toBe(true);
    await untilOverrideEnded(call);
    expect(await store.refund([refundOf(result, 4)], id, result.lease.whenUs)).toEqual([4]);
  });

  it("token-bucket: its units come back at the override's interval while it is in force; none once it has ended", async () => {
    // The rule: 10 a second; the override: 10 in 10 s (1 s a unit).
    const call = ruleCall({
      algorithm: "token-bucket",
      limit: LIMIT,
      periodMs: 1000,
      burst: LIMIT,
      override: true,
    });
    await redis.hset(overrideOf(call), { limit: LIMIT, period: 10_000 });
    const id = requestId();
    const lease = await leased(call, id);
    expect(lease.result.overridden).toBe(true);
    const tatUs = Number(await redis.get(counterOf(call)));
    expect(await giveBack(id, lease)).toEqual([4]);
    expect(Number(await redis.get(counterOf(call)))).toBe(tatUs - 4 * 1_000_000);
    // Ended by its ttl: a reset since would have fenced for the rule's capacity (1 s) alone.
    const next = { ...call, identityHash: `${call.identityHash}-next` };
    await overrideFor(next, { limit: LIMIT, period: 10_000 }, 600);
    const other = requestId();
    const ending = await leased(next, other);
    await untilOverrideEnded(next);
    expect(await giveBack(other, ending)).toEqual([0]);
  });
});

describe("a split decision undone after the override it was decided under ended by its ttl", () => {
  /**
   * The refund a split decision's allowing group gets (src/resilience/sharded.ts): `when` = "-<age>", the
   * decision's time plus the refund's own timeout.
   */
  const undo = (decision: Decision, id: string, decidedAt: number) =>
    store.refund(consumedCalls(decision), id, -(Date.now() - decidedAt + DEFAULTS.adminTimeoutMs + 1) * 1000);

  it("fixed-window, the override's 2 s: nothing lands in the rule's hour counter made since", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: HOUR_MS, override: true });
    // Late in a 2 s window, so that the override's counter ends soon after the override does. (Priced at the
    // override's 2 s, the refund's span holds a window edge: that alone stops it.)
    await windowJustBegun(SHORT_MS, 100);
    await sleep(1200);
    await overrideFor(call, { limit: LIMIT, period: SHORT_MS }, 600);
    const id = requestId();
    const decidedAt = Date.now();
    const decision = await store.decide([{ ...call, cost: 4 }], id);
    expect(decision.results[0]?.overridden).toBe(true);
    await untilExpired(call);
    expect(await redis.exists(overrideOf(call))).toBe(0);
    // The rule's hour again: a counter of its own, filled to the limit.
    await expectNothingBack(call, () => undo(decision, id, decidedAt));
  });

  it("token-bucket: the units go back at the interval they were taken at, not the rule's", async () => {
    // The rule: 10 in 10 s (1 s a unit); the override: 100 a second, burst 10 (10 ms a unit), for 600 ms.
    const call = ruleCall({
      algorithm: "token-bucket",
      limit: LIMIT,
      periodMs: 10_000,
      burst: LIMIT,
      override: true,
    });
    await overrideFor(call, { limit: 100, period: 1000, burst: LIMIT }, 600);
    const id = requestId();
    const decidedAt = Date.now();
    const decision = await store.decide([{ ...call, cost: 5 }], id, { stamps: true });
    expect(decision.results[0]?.overridden).toBe(true);
    await untilOverrideEnded(call);
    expect(await admits(call, LIMIT)).toBe(true); // the rule's whole bucket
    await undo(decision, id, decidedAt);
    // 50 ms given back, not 5 s: not one more unit.
    expect(await admits(call, 1)).toBe(false);
  });

  it("token-bucket, an override of a larger burst, set again with a smaller one, then a reset: nothing into the fresh state", async () => {
    // The rule: 10 a second, burst 2 (200 ms: a fence of 251 ms). The override: the same rate, burst 50 (5 s),
    // for 150 ms, then set again by the admin API with burst 2, and the identity reset (a review's sequence).
    const call = ruleCall({
      algorithm: "token-bucket",
      limit: LIMIT,
      periodMs: 1000,
      burst: 2,
      override: true,
    });
    await overrideFor(call, { limit: LIMIT, period: 1000, burst: 50 }, 150);
    const id = requestId();
    const decidedAt = Date.now();
    const decision = await store.decide([{ ...call, cost: 40 }], id, { stamps: true }); // 4 s of the bucket
    expect(decision.results[0]?.overridden).toBe(true);
    await untilOverrideEnded(call);
    const target = { prefix, rule: call.rule, identityHash: call.identityHash };
    const smaller = { limit: LIMIT, periodMs: 1000, burst: 2 };
    await fenceReturns(target, call.algorithm, [call], smaller, store.redis);
    await redis.hset(overrideOf(call), { limit: LIMIT, period: 1000, burst: 2 });
    await reset(call);
    // The set's fence (30 s for a bucket) stops the refund by itself; gone, as a fence sized for the smaller
    // burst (126 ms) would be by now, the edge still does not send it.
    await redis.del(resetFenceKey(prefix, call.rule, call.identityHash));
    expect(await admits(call, 2)).toBe(true); // the fresh bucket, spent
    // Its stamp lies 4 s past its decision, beyond what a reset fences at least (the rule's 200 ms): the refund
    // reaches back further than that, so it is not sent (before: [2], 4 units at once against 2).
    expect(await undo(decision, id, decidedAt)).toEqual([0]);
    expect(await admits(call, 1)).toBe(false);
  });
});

it("a refund of several rules, some priced at an override: each rule reads its own override, whatever the order", async () => {
  const identityHash = ruleCall({ algorithm: "fixed-window" }).identityHash;
  const priced = (rule: string) =>
    ruleCall({
      algorithm: "fixed-window",
      rule,
      identityHash,
      limit: LIMIT,
      periodMs: SHORT_MS,
      override: true,
    });
  const [a, c] = [priced("a"), priced("c")];
  const b = ruleCall({
    algorithm: "sliding-window",
    rule: "b",
    identityHash,
    limit: LIMIT,
    periodMs: HOUR_MS,
  });
  for (const call of [a, c]) await redis.hset(overrideOf(call), { limit: LIMIT, period: HOUR_MS });
  const id = requestId();
  const decision = await store.decide(
    [a, b, c].map((call) => ({ ...call, cost: 3 })),
    id,
  );
  expect(decision.results.map((r) => r.overridden)).toEqual([true, false, true]);
  // Only c's override changes: only c's units stay where they are.
  await redis.hset(overrideOf(c), { limit: LIMIT + 1 });
  expect(await store.refund(consumedCalls(decision), id, 0)).toEqual([3, 3, 0]);
});

describe("a bucket's TAT rebuilt to the very µs a write from before a reset left (1 µs a unit makes it certain)", () => {
  const redisNowUs = async () => {
    const [seconds, micros] = await redis.time();
    return Number(seconds) * 1_000_000 + Number(micros);
  };
  /** Arrivals on the fresh state until its TAT is exactly `target`: `first` units, then the rest, a burst at most each. */
  async function rebuildTo(call: RuleCall, target: number, first: number): Promise<boolean> {
    for (let tries = 0; tries < 5; tries++) {
      if (!(await store.decide([{ ...call, cost: first }], requestId())).allowed) return false;
      let tat = Number(await redis.get(counterOf(call)));
      while (tat < target) {
        const cost = Math.min(call.burst, target - tat);
        if (!(await store.decide([{ ...call, cost }], requestId())).allowed) break;
        tat = Number(await redis.get(counterOf(call)));
      }
      if (tat === target) return true;
    }
    return false;
  }
  it("a lease priced at an override of a larger burst that ended by its ttl, set again smaller, then a reset: its return gives nothing", async () => {
    // The rule: 1e6 a second, burst 100 000 (100 ms). The override: the same rate, burst 5e6 (5 s), for 400 ms.
    const call = ruleCall({
      algorithm: "token-bucket",
      limit: 1_000_000,
      periodMs: 1000,
      burst: 100_000,
      override: true,
    });
    await overrideFor(call, { limit: 1_000_000, period: 1000, burst: 5_000_000 }, 400);
    expect((await store.decide([{ ...call, cost: 4_000_000 }], requestId())).allowed).toBe(true);
    const leaseId = requestId();
    const result = (await store.decide([call], leaseId, { lease: { units: [2_000_000], maxMs: 1000 } }))
      .results[0];
    const grant = result?.lease;
    if (!result || !grant) throw new Error("no lease");
    expect(result.overridden).toBe(true);
    await untilOverrideEnded(call);
    // The admin API sets it again with the same limit and period, burst 100 000, then resets the identity.
    const target = { prefix, rule: call.rule, identityHash: call.identityHash };
    await fenceReturns(
      target,
      call.algorithm,
      [call],
      { limit: 1_000_000, periodMs: 1000, burst: 100_000 },
      store.redis,
    );
    await redis.hset(overrideOf(call), { limit: 1_000_000, period: 1000, burst: 100_000 });
    await reset(call);
    // The set's fence stands as long as any return reaches (30 s), not the smaller burst's 126 ms.
    expect(await redis.pttl(resetFenceKey(prefix, call.rule, call.identityHash))).toBeGreaterThan(25_000);
    await sleep(200); // past the 126 ms a fence for the smaller burst stood
    // Fresh traffic up to the lease's TAT, then its return: before, 74 889 units into the fresh bucket.
    while (grant.tatUs - (await redisNowUs()) > 90_000) await sleep(5);
    expect(await rebuildTo(call, grant.tatUs, 40_000)).toBe(true);
    expect(await store.refund([refundOf(result, grant.units - 1)], leaseId, grant.tatUs)).toEqual([0]);
  });

  it("a request held before a reset: its give-back while the fence stands restores nothing", async () => {
    // 1e6 a second, burst 2e6 (2 s), a delay of 5 s.
    const call = ruleCall({
      algorithm: "token-bucket",
      limit: 1_000_000,
      periodMs: 1000,
      burst: 2_000_000,
      delayMs: 5000,
    });
    await store.decide([{ ...call, cost: 2_000_000 }], requestId()); // the bucket spent
    const id = requestId();
    const held = await store.decide([{ ...call, cost: 1_000_000 }], id);
    const reservation = held.results[0]?.reservation;
    if (!reservation) throw new Error("not held");
    await reset(call);
    expect(await rebuildTo(call, reservation.tatUs, 1_500_000)).toBe(true); // fresh held requests up to it
    const tat = await redis.get(counterOf(call));
    await giveBackHeld(new EndpointDecider(store), held, id); // its client went away
    // Before: the TAT from before the reset came back, a second of the rate freed.
    expect(await redis.get(counterOf(call))).toBe(tat);
  });

  // 1e6 a second, burst 200 000 (200 ms), a delay of 3 s: five held requests of a whole burst each put the last
  // one's TAT 1.2 s ahead, while a fence for the capacity alone falls after 251 ms. Fresh requests then rebuilt
  // that TAT, and the give-back restored the TAT from before the reset: 200 000 units more at once (reviews'
  // cases; the second one's admin ran a config without the delay, as after a deploy).
  it.each([
    ["the admin's config knows the delay: the fence stands for it too", 3000],
    ["a deploy since dropped the delay: the fence stands until the TAT the state held", 0],
  ])(
    "a request held longer than its bucket's capacity, then a reset (%s): its give-back restores nothing",
    async (_, configuredDelayMs) => {
      const call = ruleCall({
        algorithm: "token-bucket",
        limit: 1_000_000,
        periodMs: 1000,
        burst: 200_000,
        delayMs: 3000,
      });
      await store.decide([{ ...call, cost: 200_000 }], requestId()); // the bucket spent
      for (let i = 0; i < 4; i++) await store.decide([{ ...call, cost: 200_000 }], requestId());
      const id = requestId();
      const held = await store.decide([{ ...call, cost: 200_000 }], id);
      const reservation = held.results[0]?.reservation;
      if (!reservation) throw new Error("not held");
      await reset(call, { ...call, delayMs: configuredDelayMs });
      expect(await redis.pttl(resetFenceKey(prefix, call.rule, call.identityHash))).toBeGreaterThan(1000);
      await sleep(300); // past the capacity's fence
      expect(await rebuildTo(call, reservation.tatUs, 100_000)).toBe(true); // fresh held requests up to it
      const tat = await redis.get(counterOf(call));
      await giveBackHeld(new EndpointDecider(store), held, id);
      expect(await redis.get(counterOf(call))).toBe(tat);
    },
  );

  it("a reset that finds the bucket's refund ledger fences for the longest, 30 s", async () => {
    // Isolates whose config has no delay for the rule (a deploy under way) may have lowered its TAT below a
    // held request's write by a split refund: the state's TAT no longer bounds what pending give-backs compare.
    const call = ruleCall({
      algorithm: "gcra",
      limit: 1_000_000,
      periodMs: 1000,
      burst: 200_000,
      delayMs: 3000,
    });
    await store.decide([call], requestId());
    const ledger = `${counterOf(call)}:refunded`;
    await redis
      .multi()
      .zadd(ledger, Date.now() * 1000, "1000:1:req")
      .pexpire(ledger, 30_000)
      .exec();
    await reset(call);
    expect(await redis.pttl(resetFenceKey(prefix, call.rule, call.identityHash))).toBeGreaterThan(29_000);
    expect(await redis.exists(counterOf(call))).toBe(0);
    expect(await redis.exists(ledger)).toBe(1); // its entries still count for refunds that may come
  });

  it("a request held under an override of a larger capacity than the rule's: its give-back restores nothing", async () => {
    // The rule: 1 a second, burst 1, a delay of 5 s. The override: burst 10. A reset after the override's ttl
    // ended would fence for the rule's own 1 s + 5 s only, while this request's TAT lies 11 s ahead.
    const call = ruleCall({
      algorithm: "gcra",
      limit: 1,
      periodMs: 1000,
      burst: 1,
      delayMs: 5000,
      override: true,
    });
    await overrideFor(call, { limit: 1, period: 1000, burst: 10 }, 60_000);
    await store.decide([{ ...call, cost: 10 }], requestId()); // the override's burst spent
    const id = requestId();
    const held = await store.decide([call], id);
    expect(held.results[0]?.delayMs).toBeGreaterThan(0);
    const tat = await redis.get(counterOf(call));
    await giveBackHeld(new EndpointDecider(store), held, id);
    expect(await redis.get(counterOf(call))).toBe(tat);
    // Held under the rule's own limits, the same give-back restores the TAT it replaced.
    const own = { ...call, override: false, identityHash: `${call.identityHash}-own` };
    await store.decide([own], requestId());
    const ownId = requestId();
    const ownHeld = await store.decide([own], ownId);
    await giveBackHeld(new EndpointDecider(store), ownHeld, ownId);
    expect(await redis.get(counterOf(own))).toBe(String(ownHeld.results[0]?.reservation?.previousTatUs));
  });
});
