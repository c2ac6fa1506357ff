/**
 * An override that changes a rule's period, on real Redis through the local REST server: the reply says which
 * period is in force (the window the edge advertises) and whether an override set the limits, and a
 * fixed-window counter created under one period never lives on under another (docs/script.md,
 * "Time"). Fixed windows run in real time: their counters expire on Redis's own clock.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { overrideKey, stateKey } from "../../src/engine/keys";
import { reaimArguments, scriptArguments } from "../../src/engine/script";
import type { Store } from "../../src/engine/store";
import type { RuleCall } from "../../src/engine/types";
import { awayFromWindowEdge } from "../support/window-edge";
import { directRedis, redisNowMs, requestId, ruleCall, testStore, uniquePrefix } from "./lua-support";

let redis: IORedis;
let store: Store;
const prefix = uniquePrefix("override-period");
beforeAll(() => {
  redis = directRedis();
  store = testStore(prefix);
});
afterAll(() => redis.quit());

const RULE_MS = 10_000;
const HOUR_MS = 3_600_000;

async function hit(call: RuleCall, opts: Parameters<Store["decide"]>[2] = {}) {
  const decision = await store.decide([call], requestId(), opts);
  const result = decision.results[0];
  if (!result) throw new Error("no result");
  return result;
}

/** The script's raw reply to a plain decision of `calls`, as the Worker sends it. */
async function rawReply(calls: RuleCall[]): Promise<unknown[]> {
  const { script, keys, args } = scriptArguments(prefix, calls, requestId());
  return (await store.redis.runScript(script, keys, args)) as unknown[];
}

const counterOf = (call: RuleCall) => stateKey(prefix, call.rule, call.identityHash);
const overrideOf = (call: RuleCall) => overrideKey(prefix, call.rule, call.identityHash);

/** Milliseconds until the current window of `periodMs` ends, on Redis's clock. */
const untilEnd = async (periodMs: number) => periodMs - ((await redisNowMs(redis)) % periodMs);

describe("the period in force, and whether an override set the limits", () => {
  it("come back with the reply when an override applied, and the common reply stays as it was", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: 3, periodMs: RULE_MS, override: true });
    // Read, but no override there (an isolate that does not know it is gone): as short as without one.
    expect(await rawReply([call])).toHaveLength(6);
    expect(await hit(call)).toMatchObject({ limit: 3, periodMs: RULE_MS, overridden: false });
    // The rule's very own limit, but an override's all the same (its ttl may end it).
    await redis.hset(overrideOf(call), { limit: 3 });
    expect(await rawReply([call])).toHaveLength(7);
    expect(await hit(call)).toMatchObject({ limit: 3, periodMs: RULE_MS, overridden: true });

    await redis.hset(overrideOf(call), { limit: 6, period: HOUR_MS });
    expect(await hit(call)).toMatchObject({
      outcome: "allowed",
      limit: 6,
      periodMs: HOUR_MS,
      overridden: true,
    });
    const plain = ruleCall({ algorithm: "fixed-window", limit: 3, periodMs: RULE_MS, override: false });
    expect(await hit(plain)).toMatchObject({ limit: 3, periodMs: RULE_MS, overridden: false });
  });

  it("are each rule's own in a call of several rules, and a denial's and a peek's too", async () => {
    const changed = ruleCall({ algorithm: "sliding-window", limit: 2, periodMs: 60_000, override: true });
    const same = ruleCall({ algorithm: "gcra", limit: 5, periodMs: 60_000, override: true });
    // Only a burst: nothing else in the reply would show that this bucket's limits are an override's.
    const burst = ruleCall({ algorithm: "token-bucket", limit: 5, periodMs: 60_000, override: true });
    await redis.hset(overrideOf(changed), { limit: 1, period: HOUR_MS });
    await redis.hset(overrideOf(burst), { burst: 50 });
    const decide = async (opts: Parameters<Store["decide"]>[2] = {}) =>
      (await store.decide([same, changed, burst], requestId(), opts)).results.map((r) => [
        r.outcome,
        r.periodMs,
        r.overridden,
      ]);
    expect(await decide()).toEqual([
      ["allowed", 60_000, false],
      ["allowed", HOUR_MS, true],
      ["allowed", 60_000, true],
    ]);
    expect(await decide()).toEqual([
      ["allowed", 60_000, false],
      ["denied", HOUR_MS, true],
      ["allowed", 60_000, true],
    ]);
    expect(await decide({ peek: true })).toEqual([
      ["allowed", 60_000, false],
      ["denied", HOUR_MS, true],
      ["allowed", 60_000, true],
    ]);
  });

  it("is decoded beside a delayed request's stamps and beside a lease", async () => {
    // A token bucket of 1 per 10 s under the override, a request over the rate held up to 20 s for its slot.
    const delayed = ruleCall({ algorithm: "token-bucket", limit: 60, periodMs: 60_000, delayMs: 20_000 });
    await redis.hset(overrideOf(delayed), { limit: 1, period: 10_000, burst: 1 });
    expect(await hit(delayed)).toMatchObject({ outcome: "allowed", periodMs: 10_000, delayMs: undefined });
    const held = await hit(delayed);
    expect(held).toMatchObject({ outcome: "allowed", periodMs: 10_000, overridden: true });
    expect(held.delayMs).toBeGreaterThan(0);
    expect(held.reservation?.tatUs).toBeGreaterThan(0);

    await awayFromWindowEdge(HOUR_MS, 15_000, () => redisNowMs(redis));
    const leased = ruleCall({ algorithm: "fixed-window", limit: 3, periodMs: RULE_MS });
    await redis.hset(overrideOf(leased), { limit: 100, period: HOUR_MS });
    const granted = await hit(leased, { lease: { units: [10], maxMs: 1000 } });
    expect(granted).toMatchObject({
      limit: 100,
      periodMs: HOUR_MS,
      overridden: true,
      lease: { units: 10, periodMs: HOUR_MS },
    });
  });
});

describe("a fixed-window counter under an override's period", () => {
  // Every test below tells an hour's window from a 10 s one: not in the last seconds of an hour, where both end
  // together.
  beforeAll(() => awayFromWindowEdge(HOUR_MS, 20_000, () => redisNowMs(redis)));

  it("is re-aimed at the override's window by the next call that reads it, its count kept", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: 100, periodMs: RULE_MS, override: false });
    expect(await hit(call)).toMatchObject({ remaining: 99 });
    expect(await redis.pttl(counterOf(call))).toBeLessThanOrEqual(RULE_MS);

    await redis.hset(overrideOf(call), { limit: 100, period: HOUR_MS });
    expect(await hit({ ...call, override: true })).toMatchObject({ remaining: 98, periodMs: HOUR_MS });
    const ttl = await redis.pttl(counterOf(call));
    expect(Math.abs(ttl - (await untilEnd(HOUR_MS)))).toBeLessThanOrEqual(1000);
  });

  it("outlives neither the override's removal nor its ttl: a call that still reads it re-aims the counter", async () => {
    // An isolate keeps reading an override that ended by its ttl (it stays in the override index).
    const call = ruleCall({ algorithm: "fixed-window", limit: 2, periodMs: RULE_MS, override: true });
    await redis.hset(overrideOf(call), { limit: 5, period: HOUR_MS });
    for (let i = 0; i < 2; i++)
      expect(await hit(call)).toMatchObject({ outcome: "allowed", periodMs: HOUR_MS });
    expect(await redis.pttl(counterOf(call))).toBeGreaterThan(RULE_MS);

    await redis.del(overrideOf(call));
    const denied = await hit(call);
    expect(denied).toMatchObject({ outcome: "denied", limit: 2, periodMs: RULE_MS });
    // The counter now ends with the rule's window, as the denial says: quota is back when it said.
    const ttl = await redis.pttl(counterOf(call));
    expect(ttl).toBeLessThanOrEqual(RULE_MS);
    expect(ttl).toBeLessThanOrEqual(denied.retryAfterMs + 1);
    // And a call that no longer reads it (the script's fast path, which trusts a live counter) agrees.
    const lean = await hit({ ...call, override: false });
    expect(lean.outcome).toBe("denied");
    expect(lean.retryAfterMs).toBeLessThanOrEqual(RULE_MS);
  });

  it("is re-aimed by the admin API's re-aim call, count kept; a counter already aimed right is left alone", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: 2, periodMs: RULE_MS, override: true });
    await redis.hset(overrideOf(call), { limit: 5, period: HOUR_MS });
    for (let i = 0; i < 2; i++) await hit(call);
    await redis.del(overrideOf(call));
    const reaim = (periodMs: number) => {
      const { script, keys, args } = reaimArguments(prefix, call.rule, call.identityHash, periodMs);
      return store.redis.runScript(script, keys, args);
    };

    expect(Number(await reaim(RULE_MS))).toBe(1);
    expect(await redis.pttl(counterOf(call))).toBeLessThanOrEqual(RULE_MS);
    expect(await redis.get(counterOf(call))).toBe("2");
    expect(Number(await reaim(RULE_MS))).toBe(0);
    const lean = await hit({ ...call, override: false });
    expect(lean.outcome).toBe("denied");
    expect(lean.retryAfterMs).toBeLessThanOrEqual(RULE_MS);

    // The other way: a short window's counter aimed at an hour's end keeps its count until then.
    expect(Number(await reaim(HOUR_MS))).toBe(1);
    expect(Math.abs((await redis.pttl(counterOf(call))) - (await untilEnd(HOUR_MS)))).toBeLessThanOrEqual(
      1000,
    );

    // No counter: nothing to re-aim, and nothing created.
    const fresh = ruleCall({ algorithm: "fixed-window", limit: 2, periodMs: RULE_MS });
    const { script, keys, args } = reaimArguments(prefix, fresh.rule, fresh.identityHash, RULE_MS);
    expect(Number(await store.redis.runScript(script, keys, args))).toBe(0);
    expect(await redis.exists(counterOf(fresh))).toBe(0);
  });
});
