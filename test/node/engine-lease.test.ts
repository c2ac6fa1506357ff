/**
 * The script's lease call on real Redis: a rule takes more than the request's cost at once (at most half of
 * what is left, never past a window's edge), the units are counted in Redis before anyone spends them, and
 * a denied request leases nothing anywhere.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { overrideKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import type { Algorithm, RuleCall } from "../../src/engine/types";
import { awayFromWindowEdge } from "../support/window-edge";
import {
  directRedis,
  peekRemaining,
  redisNowMs,
  requestId,
  ruleCall,
  testStore,
  uniquePrefix,
} from "./lua-support";

let redis: IORedis;
let store: Store;
const prefix = uniquePrefix("lease");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

const remaining = (call: RuleCall) => peekRemaining(store, call);

/** A bucket records leased units as if spent at the lease's end: up to one unit less shows, never more. */
const expectLeft = async (call: RuleCall, units: number) => {
  const left = await remaining(call);
  expect(left).toBeLessThanOrEqual(units);
  expect(left).toBeGreaterThanOrEqual(
    call.algorithm === "token-bucket" || call.algorithm === "gcra" ? units - 1 : units,
  );
};

describe.each(["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"] as Algorithm[])(
  "%s",
  (algorithm) => {
    it("leases at most half of what is left, counted in Redis at once, and a refund gives it back", async () => {
      // A day's period: a bucket refills one unit in 864 s, so a slow run's seconds between two reads never
      // show a refill as units the lease failed to count.
      const call = ruleCall({ algorithm, limit: 100, periodMs: 86_400_000 });
      const id = requestId();
      const decision = await store.decide([call], id, { lease: { units: [30], maxMs: 1000 } });
      expect(decision.allowed).toBe(true);
      const lease = decision.results[0]?.lease;
      expect(lease).toMatchObject({ units: 30, lifeMs: expect.any(Number) });
      expect(lease?.lifeMs).toBeGreaterThanOrEqual(10);
      expect(lease?.lifeMs).toBeLessThanOrEqual(1000);
      await expectLeft(call, 70);
      // Asking for everything gets half of what is left.
      const before = await remaining(call);
      const second = await store.decide([call], requestId(), { lease: { units: [1000], maxMs: 1000 } });
      expect(second.results[0]?.lease?.units).toBe(Math.floor(before / 2));
      await expectLeft(call, before - Math.floor(before / 2));
      const after = await remaining(call);
      if (!lease) return;
      if (algorithm === "token-bucket" || algorithm === "gcra") {
        // A bucket's lease goes back only while the TAT is still the one it wrote: the second lease's is,
        // the first one's no longer (its top units now stand for the second lease's).
        expect(await store.refund([{ ...call, cost: 29 }], id, lease.tatUs)).toEqual([0]);
        const last = second.results[0]?.lease;
        expect(await store.refund([{ ...call, cost: 10 }], requestId(), last?.tatUs ?? 0)).toEqual([10]);
        await expectLeft(call, after + 10);
        return;
      }
      const when = algorithm === "sliding-log" ? lease.whenUs + lease.lifeMs * 1000 : lease.whenUs;
      const back = await store.refund([{ ...call, cost: 29 }], id, when);
      expect(back).toEqual([29]);
      await expectLeft(call, after + 29);
    });

    it("under an override with a ttl, lives no longer than the override has left: it ends with no admin call", async () => {
      const call = ruleCall({ algorithm, limit: 100, periodMs: 600_000, override: true });
      const key = overrideKey(prefix, call.rule, call.identityHash);
      const leaseOf = async () => {
        const decision = await store.decide([call], requestId(), { lease: { units: [30], maxMs: 5000 } });
        expect(decision.results[0]?.overridden).toBe(true);
        return decision.results[0]?.lease;
      };
      await redis.hset(key, { limit: 200 });
      await awayFromWindowEdge(600_000, 6000, () => redisNowMs(redis)); // a window's edge would end it sooner
      expect((await leaseOf())?.lifeMs).toBeGreaterThan(4000); // no ttl: as long as asked
      await redis.pexpire(key, 2000);
      const lease = await leaseOf();
      expect(lease?.lifeMs).toBeGreaterThanOrEqual(1000); // (a loaded machine may take a while to ask)
      expect(lease?.lifeMs).toBeLessThanOrEqual(2000);
    });
  },
);

it("a denied request leases nothing, and a concurrency rule is never leased", async () => {
  const window = ruleCall({ algorithm: "fixed-window", rule: "w", limit: 100 });
  const slots = ruleCall({
    algorithm: "concurrency",
    rule: "c",
    limit: 1,
    identityHash: window.identityHash,
  });
  const first = await store.decide([window, slots], requestId(), { lease: { units: [20, 20], maxMs: 1000 } });
  expect(first.allowed).toBe(true);
  expect(first.results.map((r) => r.lease?.units)).toEqual([20, undefined]);
  const denied = await store.decide([window, slots], requestId(), {
    lease: { units: [20, 20], maxMs: 1000 },
  });
  expect(denied.allowed).toBe(false);
  expect(denied.results.map((r) => r.lease)).toEqual([undefined, undefined]);
  expect(await remaining(window)).toBe(80);
});

it("a bucket with a delay is never leased, even when asked (its give-backs and refunds compare TATs)", async () => {
  const held = ruleCall({ algorithm: "gcra", rule: "held", limit: 100, periodMs: 600_000, delayMs: 5000 });
  const plain = { ...held, rule: "plain", delayMs: 0 };
  const decision = await store.decide([held, plain], requestId(), {
    lease: { units: [20, 20], maxMs: 1000 },
  });
  expect(decision.allowed).toBe(true);
  expect(decision.results.map((r) => r.lease?.units)).toEqual([undefined, 20]);
  expect(await remaining(held)).toBe(99);
});

it("a renewal (cost 0) takes only the lease, and nothing at all once nothing is left", async () => {
  for (const algorithm of ["fixed-window", "sliding-log", "token-bucket"] as Algorithm[]) {
    const call = ruleCall({ algorithm, limit: 10, periodMs: 600_000, cost: 0 });
    const renewal = await store.decide([call], requestId(), { lease: { units: [4], maxMs: 1000 } });
    expect(renewal.allowed).toBe(true);
    expect(renewal.results[0]?.lease?.units).toBe(4);
    await expectLeft(call, 6);
    expect((await store.decide([{ ...call, cost: await remaining(call) }], requestId())).allowed).toBe(true);
    const empty = await store.decide([call], requestId(), { lease: { units: [4], maxMs: 1000 } });
    expect(empty.results[0]?.lease).toBeUndefined();
    expect(await remaining(call)).toBe(0);
  }
});
