/**
 * Overrides never lengthen a wait: an exhausted identity given a higher override, or whose strict override is
 * removed, waits no longer than it was told before the change. Each algorithm, through the real scripts on the
 * real redis-server (local REST server), the override set and removed by the admin API's own steps
 * (src/admin/routes-overrides.ts): the fence, the override's write, the state carried into the limits in force
 * (src/admin/reaim.ts, lua/reaim.lua). A bucket's TAT is time: carried as time into a faster rate it owed more
 * units than before, so a higher override once told a client waiting 6 s to wait 54 s.
 */

import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fenceReturns, ruleLimits } from "../../src/admin/fence";
import { deleteOverride, type Override, putOverride } from "../../src/admin/overrides";
import { reaimState } from "../../src/admin/reaim";
import type { RuleConfig } from "../../src/config/rule-config";
import { parseRules } from "../../src/config/rules";
import type { Algorithm } from "../../src/engine/algorithms";
import { stateKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import type { RuleCall, RuleResult } from "../../src/engine/types";
import { directRedis, requestId, ruleCall, testStore, uniquePrefix } from "./lua-support";

const prefix = uniquePrefix("override-wait");
let store: Store;
let redis: IORedis;
beforeAll(() => {
  store = testStore(prefix);
  redis = directRedis();
});
afterAll(() => redis.quit());

const MINUTE_MS = 60_000;

/** A rule as the config parses it, and a call of it for a fresh identity that reads its override. */
function ruleOf(algorithm: Algorithm, limit: number, burst: number): { rule: RuleConfig; call: RuleCall } {
  const [rule] = parseRules(
    [{ name: `r-${algorithm}`, key: "ip", algorithm, limit, period: "1m", burst }].map((raw) =>
      algorithm === "token-bucket" || algorithm === "gcra" ? raw : { ...raw, burst: undefined },
    ),
    { label: "RATE_LIMIT_RULES", jwtVerifiable: false },
  );
  if (!rule) throw new Error("no rule");
  const call = ruleCall({
    algorithm,
    rule: rule.name,
    limit: rule.limit,
    periodMs: rule.periodMs,
    burst: rule.burst,
  });
  return { rule, call };
}

const targetOf = (call: RuleCall) => ({ prefix, rule: call.rule, identityHash: call.identityHash });

/** PUT /overrides/:rule/:identity, as the route does it. */
async function setOverride(rule: RuleConfig, call: RuleCall, override: Override): Promise<void> {
  const target = targetOf(call);
  const replaced = await fenceReturns(target, rule.algorithm, ruleLimits(rule), override, store.redis);
  await putOverride(target, override, undefined, store.redis);
  await reaimState(target, rule, replaced, override, store.redis);
}

/** DELETE /overrides/:rule/:identity, as the route does it. */
async function removeOverride(rule: RuleConfig, call: RuleCall): Promise<void> {
  const target = targetOf(call);
  const replaced = await fenceReturns(target, rule.algorithm, ruleLimits(rule), undefined, store.redis);
  expect(await deleteOverride(target, store.redis)).toBe(true);
  await reaimState(target, rule, replaced, undefined, store.redis);
}

/** One request of the identity: its result, and when (ms on this machine's clock) its wait ends. */
async function request(call: RuleCall): Promise<{ result: RuleResult; waitEndsAt: number }> {
  const sent = Date.now();
  const [result] = (await store.decide([call], requestId())).results;
  if (!result) throw new Error("no result");
  return { result, waitEndsAt: sent + (result.outcome === "allowed" ? 0 : result.retryAfterMs) };
}

/** Requests until one is denied: that denial (the identity is exhausted). */
async function exhaust(call: RuleCall): Promise<{ result: RuleResult; waitEndsAt: number }> {
  for (let i = 0; i < 1000; i++) {
    const answer = await request(call);
    if (answer.result.outcome === "denied") return answer;
  }
  throw new Error("never denied");
}

// Every algorithm an override applies to (a shed rule's sub-keys take none).
const CASES: { algorithm: Algorithm; exhaustedWaitMs: [number, number] }[] = [
  { algorithm: "fixed-window", exhaustedWaitMs: [1, MINUTE_MS] },
  { algorithm: "sliding-window", exhaustedWaitMs: [1, 2 * MINUTE_MS] },
  { algorithm: "sliding-log", exhaustedWaitMs: [MINUTE_MS - 5000, MINUTE_MS] },
  { algorithm: "token-bucket", exhaustedWaitMs: [5000, 6000] },
  { algorithm: "gcra", exhaustedWaitMs: [5000, 6000] },
  { algorithm: "concurrency", exhaustedWaitMs: [1000, MINUTE_MS] }, // until the oldest slot's lease ends
];

describe.each(CASES)(
  "$algorithm: an override never lengthens an exhausted identity's wait",
  ({ algorithm, exhaustedWaitMs: [least, most] }) => {
    it("given a higher override (1000 per minute, burst 100), it waits no longer than it was told", async () => {
      const { rule, call } = ruleOf(algorithm, 10, 10);
      const before = await exhaust(call);
      expect(before.result.retryAfterMs).toBeGreaterThanOrEqual(least);
      expect(before.result.retryAfterMs).toBeLessThanOrEqual(most);

      await setOverride(rule, call, { limit: 1000, periodMs: MINUTE_MS, burst: 100 });
      const after = await request(call);
      expect(after.result.limit).toBe(1000);
      // The units it took are still owed (or counted): a higher limit lets it in at once, here.
      expect(after.result.outcome).toBe("allowed");
      expect(after.waitEndsAt).toBeLessThanOrEqual(before.waitEndsAt);
    });

    it("whose strict override (10 per 10 minutes) is removed, it waits no longer than the override told it", async () => {
      const { rule, call } = ruleOf(algorithm, 100, 10);
      await setOverride(rule, call, { limit: 10, periodMs: 10 * MINUTE_MS, burst: 10 });
      const before = await exhaust(call);
      expect(before.result.limit).toBe(10);

      await removeOverride(rule, call);
      const after = await request({ ...call, override: false });
      expect(after.result.limit).toBe(100);
      expect(after.waitEndsAt).toBeLessThanOrEqual(before.waitEndsAt);
      if (algorithm === "token-bucket" || algorithm === "gcra") {
        // Ten units owed at the rule's 0.6 s each: its whole burst, one more unit 0.6 s away (not the
        // override's 60 s a unit, which carried as time would have made 534 s).
        expect(after.result.outcome).toBe("denied");
        expect(after.result.retryAfterMs).toBeLessThanOrEqual(600);
      } else {
        expect(after.result.outcome).toBe("allowed");
      }
    });
  },
);

describe("a bucket's state carried into a new rate (lua/reaim.lua)", () => {
  it("keeps the units owed: the TAT moves by their count at the new interval, and a stricter rate owes more time", async () => {
    const { rule, call } = ruleOf("token-bucket", 10, 10);
    for (let i = 0; i < 4; i++) await request(call);
    const key = stateKey(prefix, call.rule, call.identityHash);
    const owedUs = async () => {
      const [seconds, micros] = await redis.time();
      return Number(await redis.get(key)) - (Number(seconds) * 1e6 + Number(micros));
    };
    // Units owed: the time owed over the interval in force (less what refilled while the test ran).
    const unitsOwed = async (intervalS: number) => (await owedUs()) / 1e6 / intervalS;
    expect(await unitsOwed(6)).toBeCloseTo(4, 0); // four units at 6 s each: 24 s owed
    await setOverride(rule, call, { limit: 100, periodMs: MINUTE_MS, burst: 100 });
    expect(await unitsOwed(0.6)).toBeCloseTo(4, 0); // 2.4 s owed (as time, 24 s would be 40 units)
    await setOverride(rule, call, { limit: 1, periodMs: MINUTE_MS, burst: 10 });
    // A stricter override charges what was taken at its own rate: 4 units at 60 s each.
    expect(await unitsOwed(60)).toBeCloseTo(4, 0);
    expect(await redis.pttl(key)).toBeGreaterThan(200_000);
    await removeOverride(rule, call);
    expect(await unitsOwed(6)).toBeCloseTo(4, 0);
  });
});
