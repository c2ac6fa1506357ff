/**
 * A bucket's give-back (a rule counting by status or settling, "at most this long ago", with its decision's
 * stamp) touches its refund ledger only when it must (docs/script.md, "The refund ledger"): an idle bucket's
 * gives everything back and writes nothing; one under a later request's units enters what it gave, which that
 * request's own give-back then counts, so units that refilled meanwhile never come back twice.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULTS } from "../../src/engine/defaults";
import { consumedCalls } from "../../src/engine/groups";
import { stateKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import type { Algorithm, Decision } from "../../src/engine/types";
import {
  directRedis,
  peekRemaining,
  requestId,
  ruleCall,
  sleep,
  testStore,
  uniquePrefix,
} from "./lua-support";

let redis: IORedis;
let store: Store;
const prefix = uniquePrefix("ledger-skip");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

/** The give-back a rule counting by status sends (src/middleware/count.ts): its span as there. */
const giveBack = (decision: Decision, id: string, decidedAt: number) =>
  store.refund(consumedCalls(decision), id, -(Date.now() - decidedAt + DEFAULTS.adminTimeoutMs + 1) * 1000);

const ledgerOf = (rule: string, identityHash: string) => `${stateKey(prefix, rule, identityHash)}:refunded`;

describe.each(["token-bucket", "gcra"] as Algorithm[])("%s", (algorithm) => {
  it("an idle bucket's give-back returns every unit and writes no ledger", async () => {
    // A unit each 6 s: nothing refills while the test runs.
    const call = ruleCall({ algorithm, limit: 10, periodMs: 60_000 });
    for (let i = 0; i < 3; i++) {
      const id = requestId();
      const decidedAt = Date.now();
      const decision = await store.decide([{ ...call, cost: 4 }], id, { stamps: true });
      expect(await giveBack(decision, id, decidedAt)).toEqual([4]);
      expect(await peekRemaining(store, call)).toBe(10);
    }
    expect(await redis.exists(ledgerOf(call.rule, call.identityHash))).toBe(0);
  });

  it("a give-back under a later request's units enters the ledger; that request's, once its units have refilled, gives nothing", async () => {
    // 250 ms a unit, a burst of 10.
    const call = ruleCall({ algorithm, limit: 4, periodMs: 1000, burst: 10 });
    const [first, second] = [requestId(), requestId()];
    const decidedAt = Date.now();
    // On a full bucket: the first's 2 units (500 ms) at the bottom, the second's 2 above them.
    const one = await store.decide([{ ...call, cost: 2 }], first, { stamps: true });
    const two = await store.decide([{ ...call, cost: 2 }], second, { stamps: true });
    // The first given back at once: nothing was owed before it (no ledger to read), but the second's units lie
    // above it, so what it gave goes in the ledger (moving the second's span down by that much).
    const [back = 0] = await giveBack(one, first, decidedAt);
    expect(back).toBeGreaterThanOrEqual(1); // 2, less what a loaded machine's moments since took
    expect(back).toBeLessThanOrEqual(2);
    expect(await redis.zcard(ledgerOf(call.rule, call.identityHash))).toBe(1);
    // Once the second's moved span has refilled (600 ms), the bucket is spent again by others.
    await sleep(600);
    const key = stateKey(prefix, call.rule, call.identityHash);
    expect((await store.decide([{ ...call, cost: 10 }], requestId())).allowed).toBe(true);
    const tat = await redis.get(key);
    // The second's stamp still lies up to 400 ms ahead, but its units refilled and were spent: the ledger
    // says so. Without the first's entry, or without reading it, ~2 units came back above the burst.
    expect(await giveBack(two, second, decidedAt)).toEqual([0]);
    expect(await redis.get(key)).toBe(tat);
  });
});
