/**
 * The script's refund call on real Redis: units consumed earlier come back (exactly those, never more than
 * the state still holds), only within the window they were taken in, and a monitor/override rule uses the
 * limits in force.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { raiseFence } from "../../src/admin/fence";
import { traitsOf } from "../../src/engine/algorithms";
import { consumedCalls } from "../../src/engine/groups";
import { resetFenceKey, resetFenceMs, stateKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import { refundOf } from "../../src/engine/results";
import type { Algorithm, RuleCall, RuleResult } from "../../src/engine/types";
import { awayFromWindowEdge } from "../support/window-edge";
import {
  directRedis,
  peekRemaining,
  redisNowMs,
  requestId,
  ruleCall,
  sleep,
  testStore,
  uniquePrefix,
} from "./lua-support";

let redis: IORedis;
let store: Store;
const prefix = uniquePrefix("refund");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

const remaining = (call: RuleCall) => peekRemaining(store, call);

/** An admin reset (src/admin/routes-keys.ts): the fence for the call's limits and the delete, in one script call. */
async function reset(call: RuleCall): Promise<void> {
  const target = { prefix, rule: call.rule, identityHash: call.identityHash };
  const stateKeys = [stateKey(prefix, call.rule, call.identityHash)];
  const bucket = traitsOf(call.algorithm).shape === "bucket";
  await raiseFence(target, resetFenceMs(call.algorithm, [call]), store.redis, undefined, {
    stateKeys,
    bucket,
  });
}

/** Waits until the call's reset fence has fallen (Redis expired it). */
async function untilFenceFalls(call: RuleCall): Promise<void> {
  const fence = resetFenceKey(prefix, call.rule, call.identityHash);
  while ((await redis.pttl(fence)) !== -2) await sleep(20);
}

describe.each(["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"] as Algorithm[])(
  "%s",
  (algorithm) => {
    it("gives back exactly the units it is asked for, and no more than were consumed", async () => {
      const call = ruleCall({ algorithm, limit: 10, periodMs: 600_000 });
      const id = requestId();
      const whenUs = (await redisNowMs(redis)) * 1000;
      expect((await store.decide([{ ...call, cost: 4 }], id)).allowed).toBe(true);
      expect(await remaining(call)).toBe(6);
      // Sliding-log names its members after the request id and the score they were recorded at (its running
      // `total` is scored at or below 0).
      const key = stateKey(prefix, call.rule, call.identityHash);
      // A bucket's units are given back against the TAT their consumption wrote.
      const when =
        algorithm === "sliding-log"
          ? Number((await redis.zrangebyscore(key, "(0", "+inf", "WITHSCORES"))[1])
          : algorithm === "token-bucket" || algorithm === "gcra"
            ? Number(await redis.get(key))
            : whenUs;
      expect(await store.refund([{ ...call, cost: 3 }], id, when)).toEqual([3]);
      expect(await remaining(call)).toBe(9);
      // Asking for more than is left gives back only what is there: the 1 unit of the 4 still consumed.
      if (algorithm === "token-bucket" || algorithm === "gcra") {
        // A bucket gives back against the TAT the consumption wrote, and the refund above moved it: nothing.
        expect(await store.refund([{ ...call, cost: 5 }], id, when)).toEqual([0]);
        expect(await remaining(call)).toBe(9);
        // Against the TAT as it is now, the 1 unit still above now, never more (the TAT stops at now).
        const tatNow = Number(await redis.get(key));
        expect(await store.refund([{ ...call, cost: 5 }], id, tatNow)).toEqual([1]);
      } else {
        expect(await store.refund([{ ...call, cost: 5 }], id, when)).toEqual([1]);
      }
      expect(await remaining(call)).toBe(10);
    });
  },
);

it("a window counter gets nothing back for units taken in an earlier window", async () => {
  for (const algorithm of ["fixed-window", "sliding-window"] as Algorithm[]) {
    const call = ruleCall({ algorithm, limit: 10, periodMs: 600_000 });
    expect((await store.decide([{ ...call, cost: 4 }], requestId())).allowed).toBe(true);
    const lastWindowUs = ((await redisNowMs(redis)) - 600_000) * 1000;
    expect(await store.refund([{ ...call, cost: 3 }], "", lastWindowUs)).toEqual([0]);
    expect(await remaining(call)).toBe(6);
  }
});

it("a fixed-window refund that finds another algorithm's TAT under the rule's name gives nothing and leaves it", async () => {
  const call = ruleCall({ algorithm: "fixed-window", limit: 10, periodMs: 600_000 });
  const key = stateKey(prefix, call.rule, call.identityHash);
  const nowMs = await redisNowMs(redis);
  const tat = String((nowMs + 5_000) * 1000); // a token bucket's µs timestamp, ending where the window ends
  await redis.set(key, tat, "PXAT", nowMs - (nowMs % 600_000) + 600_000);
  expect(await store.refund([{ ...call, cost: 3 }], "", nowMs * 1000)).toEqual([0]);
  expect(await redis.get(key)).toBe(tat);
});

it("a bucket's refund ledger drops members older than the horizon now and then: it stays bounded", async () => {
  // A give-back of a request's units, as a rule counting by status sends it ("at most this long ago", with the
  // decision's stamp); every such refund that gives back time enters the ledger, and one in 16 on average
  // drops the members no refund reads any more.
  // A unit each 3.6 s: what a refund gives back has not refilled meanwhile.
  const call = ruleCall({ algorithm: "gcra", limit: 1000, periodMs: 3_600_000 });
  const ledger = `${stateKey(prefix, call.rule, call.identityHash)}:refunded`;
  await redis.zadd(ledger, ((await redisNowMs(redis)) - 60_000) * 1000, "1:1:stale");
  // One unit kept: each decision below then finds earlier units above its instant, and its refund enters the
  // ledger (with the bucket full at its decision and nothing above it at its refund, no refund can read one).
  expect((await store.decide([call], requestId())).allowed).toBe(true);
  let refunds = 0;
  while ((await redis.zscore(ledger, "1:1:stale")) !== null && refunds < 300) {
    const id = requestId();
    const decision = await store.decide([call], id, { stamps: true });
    const result = decision.results[0] as RuleResult;
    expect(await store.refund([refundOf(result, 1)], id, -1_000_000)).toEqual([1]);
    refunds++;
  }
  // Gone after a few dozen refunds at most (left after 300: a chance of (15/16)^300, about 4e-9).
  expect(await redis.zscore(ledger, "1:1:stale")).toBeNull();
  expect(await redis.zcard(ledger)).toBeLessThanOrEqual(refunds);
});

it("sliding-log with `when` unknown removes only the request id's own members", async () => {
  const call = ruleCall({ algorithm: "sliding-log", limit: 10, periodMs: 600_000 });
  const mine = requestId();
  await store.decide([{ ...call, cost: 3 }], mine);
  await store.decide([{ ...call, cost: 2 }], requestId());
  expect(await store.refund([{ ...call, cost: 10 }], mine, 0)).toEqual([3]);
  expect(await remaining(call)).toBe(8);
});

it("token-bucket never moves the TAT below now: a full bucket stays full", async () => {
  const call = ruleCall({ algorithm: "token-bucket", limit: 10, periodMs: 600_000 });
  await store.decide([{ ...call, cost: 2 }], requestId());
  expect(await store.refund([{ ...call, cost: 50 }], "", 0)).toEqual([2]);
  expect(await remaining(call)).toBe(10);
});

it("concurrency gives back the request id's slot; several rules in one call", async () => {
  const slots = ruleCall({ algorithm: "concurrency", rule: "c", limit: 2 });
  const window = ruleCall({
    algorithm: "fixed-window",
    rule: "w",
    limit: 5,
    identityHash: slots.identityHash,
  });
  const id = requestId();
  await store.decide([slots, window], id);
  expect(await store.refund([slots, window], id, 0)).toEqual([1, 1]);
  expect(await remaining(slots)).toBe(2);
  expect(await remaining(window)).toBe(5);
});

it("gives nothing back into a state reset since (its fence stands): the fresh quota is not enlarged", async () => {
  for (const algorithm of ["fixed-window", "sliding-window", "token-bucket", "gcra"] as Algorithm[]) {
    const call = ruleCall({ algorithm, limit: 10, periodMs: 600_000 });
    const whenUs = (await redisNowMs(redis)) * 1000;
    expect((await store.decide([{ ...call, cost: 4 }], requestId())).allowed).toBe(true);
    // An admin reset; a new request comes.
    await reset(call);
    expect((await store.decide([{ ...call, cost: 2 }], requestId())).allowed).toBe(true);
    expect(await store.refund([{ ...call, cost: 4 }], "", whenUs)).toEqual([0]);
    expect(await remaining(call)).toBe(8);
  }
});

describe("a reset's fence lasts about one period, and no refund from before the reset lands after it", () => {
  it("a window of 2 s: the fence stands one period and stops a refund in the reset's window; then the window test does", async () => {
    for (const algorithm of ["fixed-window", "sliding-window"] as Algorithm[]) {
      const call = ruleCall({ algorithm, limit: 10, periodMs: 2000 });
      const fence = resetFenceKey(prefix, call.rule, call.identityHash);
      // Taken, reset, taken again and refunded all within one window: only the fence tells the units apart.
      await awayFromWindowEdge(2000, 1000, () => redisNowMs(redis));
      const whenUs = (await redisNowMs(redis)) * 1000;
      expect((await store.decide([{ ...call, cost: 4 }], requestId())).allowed).toBe(true);
      await reset(call);
      const pttl = await redis.pttl(fence);
      expect(pttl).toBeGreaterThan(0);
      expect(pttl).toBeLessThanOrEqual(2000);
      expect((await store.decide([{ ...call, cost: 2 }], requestId())).allowed).toBe(true);
      expect(await store.refund([{ ...call, cost: 4 }], "", whenUs)).toEqual([0]);
      expect(await remaining(call)).toBe(8);
      // Once the fence has fallen the reset's window has ended too: a late return of the same units lands
      // nowhere, neither in that window's state nor in the next one's.
      await untilFenceFalls(call);
      const id = requestId();
      expect((await store.decide([{ ...call, cost: 2 }], id)).allowed).toBe(true);
      expect(await store.refund([{ ...call, cost: 4 }], "", whenUs)).toEqual([0]);
      // What the fresh state took itself still comes back ("at most 1 ms ago").
      expect(await store.refund([{ ...call, cost: 2 }], id, -1000)).toEqual([2]);
    }
  }, 20_000);

  it("a bucket of 1 s: the fence stops a return against a TAT a post-reset arrival wrote to the µs; once it falls, that TAT lies behind now", async () => {
    for (const algorithm of ["token-bucket", "gcra"] as Algorithm[]) {
      const call = ruleCall({ algorithm, limit: 10, periodMs: 1000 });
      const key = stateKey(prefix, call.rule, call.identityHash);
      const fence = resetFenceKey(prefix, call.rule, call.identityHash);
      // A lease of 4 units (its return's `when` is the TAT it wrote), then a reset.
      expect((await store.decide([{ ...call, cost: 4 }], requestId())).allowed).toBe(true);
      const leaseTat = await redis.get(key);
      await reset(call);
      const pttl = await redis.pttl(fence);
      expect(pttl).toBeGreaterThan(0);
      expect(pttl).toBeLessThanOrEqual(1000 + 250 + 1); // capacity + the longest lease + 1 ms
      // Post-reset arrivals whose TAT happens to be the lease's, to the µs: only the fence tells them apart.
      await redis.set(key, String(leaseTat), "PX", 1000);
      expect(await store.refund([{ ...call, cost: 4 }], "", Number(leaseTat))).toEqual([0]);
      expect(await redis.get(key)).toBe(leaseTat);
      await untilFenceFalls(call);
      await redis.set(key, String(leaseTat), "PX", 1000);
      expect(await store.refund([{ ...call, cost: 4 }], "", Number(leaseTat))).toEqual([0]);
      expect(await redis.get(key)).toBe(leaseTat);
    }
  }, 20_000);

  it("a bucket of 1 s: a split decision's refund of units from before a reset gives nothing once the fence has fallen", async () => {
    for (const algorithm of ["token-bucket", "gcra"] as Algorithm[]) {
      const call = ruleCall({ algorithm, limit: 10, periodMs: 1000 });
      const earlier = requestId();
      const before = await store.decide([{ ...call, cost: 4 }], earlier, { stamps: true });
      await reset(call);
      await untilFenceFalls(call);
      expect((await store.decide([{ ...call, cost: 2 }], requestId())).allowed).toBe(true);
      // Nothing goes back: the TAT the fresh decision wrote stays where it is. Compared, not read as
      // `remaining`: a bucket of 1 s refills a unit every 100 ms, which a loaded machine can take between
      // two calls (expected 9 to be 8).
      const key = stateKey(prefix, call.rule, call.identityHash);
      const tat = await redis.get(key);
      // As src/resilience/sharded.ts sends it, "at most 5 s ago" (longer than the fence): the TAT its decision
      // wrote, its stamp, lies behind now.
      expect(await store.refund(consumedCalls(before), earlier, -5_000_000)).toEqual([0]);
      const [[, time], [, tatNow]] = (await redis.multi().time().get(key).exec()) as [
        [null, [string, string]],
        [null, string | null],
      ];
      // Gone only when Redis expired it at that TAT (the bucket full again: on a loaded machine 200 ms pass),
      // never earlier, as a refund that moved it back would.
      if (tatNow === null)
        expect(Number(time[0]) * 1e6 + Number(time[1])).toBeGreaterThanOrEqual(Number(tat));
      else expect(tatNow).toBe(tat);
      // A split decision's after the reset gives back what it took; without its stamp, nothing (what is still
      // owed is unknown).
      const id = requestId();
      const after = await store.decide([{ ...call, cost: 3 }], id, { stamps: true });
      expect(await store.refund([{ ...call, cost: 3 }], id, -5_000_000)).toEqual([0]);
      expect(await store.refund(consumedCalls(after), id, -5_000_000)).toEqual([3]);
    }
  }, 20_000);

  it("sliding-log and concurrency need none: a return names its own members, which the reset removed", async () => {
    for (const algorithm of ["sliding-log", "concurrency"] as Algorithm[]) {
      const call = ruleCall({ algorithm, limit: 10, periodMs: 1000 });
      expect(resetFenceMs(algorithm, [call])).toBe(0);
      const id = requestId();
      expect((await store.decide([call], id)).allowed).toBe(true);
      await reset(call);
      expect(await redis.exists(resetFenceKey(prefix, call.rule, call.identityHash))).toBe(0);
      expect((await store.decide([call], requestId())).allowed).toBe(true);
      expect(await store.refund([{ ...call, cost: 1 }], id, 0)).toEqual([0]);
      expect(await remaining(call)).toBe(9);
    }
  });
});
