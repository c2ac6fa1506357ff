/**
 * An override that changes a rule's period, on real Redis through the local REST server: the reply says which
 * period is in force (the window the edge advertises).
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { overrideKey } from "../../src/engine/keys";
import { scriptArguments } from "../../src/engine/script";
import { runScript, type Store } from "../../src/engine/store";
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
  const { keys, args } = scriptArguments(prefix, calls, requestId());
  return (await runScript(store.redis, keys, args)) as unknown[];
}

const overrideOf = (call: RuleCall) => overrideKey(prefix, call.rule, call.identityHash);

describe("the period in force", () => {
  it("comes back with the reply when an override changes it, and the common reply stays as it was", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: 3, periodMs: RULE_MS, override: true });
    await redis.hset(overrideOf(call), { limit: 6 });
    // Only the limit changed: the reply has no more elements than a reply without an override.
    expect(await rawReply([call])).toHaveLength(6);
    expect(await hit(call)).toMatchObject({ limit: 6, periodMs: RULE_MS });

    await redis.hset(overrideOf(call), { period: HOUR_MS });
    expect(await rawReply([call])).toHaveLength(7);
    expect(await hit(call)).toMatchObject({ outcome: "allowed", limit: 6, periodMs: HOUR_MS });
    const plain = ruleCall({ algorithm: "fixed-window", limit: 3, periodMs: RULE_MS, override: false });
    expect(await hit(plain)).toMatchObject({ limit: 3, periodMs: RULE_MS });
  });

  it("is each rule's own in a call of several rules, and a denial's and a peek's too", async () => {
    const changed = ruleCall({ algorithm: "sliding-window", limit: 2, periodMs: 60_000, override: true });
    const same = ruleCall({ algorithm: "gcra", limit: 5, periodMs: 60_000, override: true });
    await redis.hset(overrideOf(changed), { limit: 1, period: HOUR_MS });
    const decide = async (opts: Parameters<Store["decide"]>[2] = {}) =>
      (await store.decide([same, changed], requestId(), opts)).results.map((r) => [r.outcome, r.periodMs]);
    expect(await decide()).toEqual([
      ["allowed", 60_000],
      ["allowed", HOUR_MS],
    ]);
    expect(await decide()).toEqual([
      ["allowed", 60_000],
      ["denied", HOUR_MS],
    ]);
    expect(await decide({ peek: true })).toEqual([
      ["allowed", 60_000],
      ["denied", HOUR_MS],
    ]);
  });

  it("is decoded beside a delayed request's stamps and beside a lease", async () => {
    // A token bucket of 1 per 10 s under the override, a request over the rate held up to 20 s for its slot.
    const delayed = ruleCall({ algorithm: "token-bucket", limit: 60, periodMs: 60_000, delayMs: 20_000 });
    await redis.hset(overrideOf(delayed), { limit: 1, period: 10_000, burst: 1 });
    expect(await hit(delayed)).toMatchObject({ outcome: "allowed", periodMs: 10_000, delayMs: undefined });
    const held = await hit(delayed);
    expect(held).toMatchObject({ outcome: "allowed", periodMs: 10_000 });
    expect(held.delayMs).toBeGreaterThan(0);
    expect(held.reservation?.tatUs).toBeGreaterThan(0);

    await awayFromWindowEdge(HOUR_MS, 15_000, () => redisNowMs(redis));
    const leased = ruleCall({ algorithm: "fixed-window", limit: 3, periodMs: RULE_MS });
    await redis.hset(overrideOf(leased), { limit: 100, period: HOUR_MS });
    const granted = await hit(leased, { lease: { units: [10], maxMs: 1000 } });
    expect(granted).toMatchObject({ limit: 100, periodMs: HOUR_MS, lease: { units: 10, periodMs: HOUR_MS } });
  });
});
