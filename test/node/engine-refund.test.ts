/**
 * The script's refund call on real Redis: units consumed earlier come back (exactly those, never more than
 * the state still holds), only within the window they were taken in, and a monitor/override rule uses the
 * limits in force.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RESET_FENCE_MS, resetFenceKey, stateKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import type { Algorithm, RuleCall } from "../../src/engine/types";
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
const prefix = uniquePrefix("refund");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

const remaining = (call: RuleCall) => peekRemaining(store, call);

describe.each(["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"] as Algorithm[])(
  "%s",
  (algorithm) => {
    it("gives back exactly the units it is asked for, and no more than were consumed", async () => {
      const call = ruleCall({ algorithm, limit: 10, periodMs: 600_000 });
      const id = requestId();
      const whenUs = (await redisNowMs(redis)) * 1000;
      expect((await store.decide([{ ...call, cost: 4 }], id)).allowed).toBe(true);
      expect(await remaining(call)).toBe(6);
      // Sliding-log names its members after the request id and the score they were recorded at.
      const key = stateKey(prefix, call.rule, call.identityHash);
      // A bucket's units are given back against the TAT their consumption wrote.
      const when =
        algorithm === "sliding-log"
          ? Number((await redis.zrange(key, 0, -1, "WITHSCORES"))[1])
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
    // An admin reset (src/admin/routes-keys.ts): the fence, then the state goes; a new request comes.
    await redis.set(resetFenceKey(prefix, call.rule, call.identityHash), "1", "PX", RESET_FENCE_MS);
    await redis.del(stateKey(prefix, call.rule, call.identityHash));
    expect((await store.decide([{ ...call, cost: 2 }], requestId())).allowed).toBe(true);
    expect(await store.refund([{ ...call, cost: 4 }], "", whenUs)).toEqual([0]);
    expect(await remaining(call)).toBe(8);
  }
});
