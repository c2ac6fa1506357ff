/**
 * A lease's return after an override changed the period, on real Redis through the local REST server: the
 * return is priced at the period the lease was granted under (src/leases/returns.ts), and gives nothing back
 * into state that did not count its units (lua/floodgate.lua's header, "Returned units"). Fixed windows run
 * in real time: their counters expire on Redis's own clock.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { fenceReturns } from "../../src/admin/fence";
import { overrideKey, stateKey } from "../../src/engine/keys";
import { reaimArguments } from "../../src/engine/script";
import { runScript, type Store } from "../../src/engine/store";
import type { LeaseGrant, RuleCall } from "../../src/engine/types";
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

const counterOf = (call: RuleCall) => stateKey(prefix, call.rule, call.identityHash);
const overrideOf = (call: RuleCall) => overrideKey(prefix, call.rule, call.identityHash);

/** The admin API's step after an override set or removal (src/admin/reaim.ts). */
async function reaim(call: RuleCall, periodMs: number): Promise<number> {
  const { keys, args } = reaimArguments(prefix, call.rule, call.identityHash, periodMs);
  return Number(await runScript(store.redis, keys, args));
}

/** An override set or removed as the admin API does it (src/admin/routes-overrides.ts), period in ms or none. */
async function changeOverride(call: RuleCall, periodMs: number | undefined): Promise<void> {
  const target = { prefix, rule: call.rule, identityHash: call.identityHash };
  await fenceReturns(target, call.algorithm, [call], store.redis);
  if (periodMs === undefined) await redis.del(overrideOf(call));
  else await redis.hset(overrideOf(call), { limit: LIMIT, period: periodMs });
  if (call.algorithm === "fixed-window") await reaim(call, periodMs ?? call.periodMs);
}

/** Waits until the identity's counter has expired (a window of the period it was aimed at has ended). */
async function untilExpired(call: RuleCall): Promise<void> {
  while ((await redis.pttl(counterOf(call))) !== -2) await sleep(20);
}

/** A lease of 5 units (half the limit) for one request's cost of 1: 4 left unspent. */
async function leased(call: RuleCall, id: string): Promise<LeaseGrant> {
  const result = (await store.decide([call], id, { lease: { units: [LIMIT], maxMs: 1000 } })).results[0];
  if (!result?.lease) throw new Error("no lease");
  expect(result.lease.units).toBe(LIMIT / 2);
  return result.lease;
}

/** The return of the lease's 4 unspent units, as src/leases/returns.ts sends it. */
const giveBack = (call: RuleCall, id: string, lease: LeaseGrant) =>
  store.refund(
    [{ ...call, cost: 4, limit: LIMIT, periodMs: lease.periodMs, override: false }],
    id,
    lease.whenUs,
  );

/** Whether `cost` more units are admitted now. */
const admits = async (call: RuleCall, cost: number) =>
  (await store.decide([{ ...call, cost }], requestId())).allowed;

describe("a fixed-window lease returned after an override changed the period", () => {
  it("taken under an hour's override, removed and re-aimed at 2 s: nothing lands in the next 2 s counter", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: SHORT_MS, override: true });
    await redis.hset(overrideOf(call), { limit: LIMIT, period: HOUR_MS });
    const id = requestId();
    const lease = await leased(call, id);
    expect(lease.periodMs).toBe(HOUR_MS);
    await redis.del(overrideOf(call));
    expect(await reaim(call, SHORT_MS)).toBe(1);

    // The next 2 s window: a counter of its own, filled to the limit.
    await untilExpired(call);
    const plain = { ...call, override: false };
    expect(await admits(plain, LIMIT)).toBe(true);
    expect(await giveBack(call, id, lease)).toEqual([0]);
    expect(await admits(plain, 1)).toBe(false);
  });

  it("taken under the rule's hour, an override of 2 s set since: nothing lands in the override's next counter", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: HOUR_MS, override: true });
    const id = requestId();
    const lease = await leased(call, id);
    expect(lease.periodMs).toBe(HOUR_MS);
    await redis.hset(overrideOf(call), { limit: LIMIT, period: SHORT_MS });
    expect(await reaim(call, SHORT_MS)).toBe(1);

    await untilExpired(call);
    expect(await admits(call, LIMIT)).toBe(true);
    expect(await giveBack(call, id, lease)).toEqual([0]);
    expect(await admits(call, 1)).toBe(false);
  });

  it("the counter that counted the units still takes them back, the override's period still in force", async () => {
    const call = ruleCall({ algorithm: "fixed-window", limit: LIMIT, periodMs: SHORT_MS, override: true });
    await redis.hset(overrideOf(call), { limit: LIMIT, period: HOUR_MS });
    const id = requestId();
    const lease = await leased(call, id);
    expect(await giveBack(call, id, lease)).toEqual([4]);
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
    expect(await giveBack(call, id, lease)).toEqual([0]);
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
    expect(await admits(call, LIMIT)).toBe(true);
    expect(await giveBack(call, id, lease)).toEqual([0]);
    expect(await admits(call, 1)).toBe(false);
  });
});
