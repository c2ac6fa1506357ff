/**
 * Slot groups on a real Redis of this file's own (through the REST server): a request whose rules key on different
 * identities is decided one call per identity, and when it is not let through the allowing groups get their
 * units back from the script's refund call, sent through the caller's waitUntil. A second "endpoint" that
 * nothing listens on stands in for a database that is down.
 */
import { createServer } from "node:net";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RedisHandle, type RestServer, startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { DEFAULTS } from "../../src/engine/defaults";
import { consumedCalls, groupCalls } from "../../src/engine/groups";
import { stateKey } from "../../src/engine/keys";
import { rendezvous } from "../../src/engine/shards";
import { createStore, type Store, StoreError } from "../../src/engine/store";
import type { Algorithm, Decision, RefundCall, RuleCall } from "../../src/engine/types";
import { giveBack } from "../../src/middleware/delay";
import { EndpointDecider } from "../../src/resilience/decider";
import { createEngine, type Engine } from "../../src/resilience/engine";
import { peekRemaining, requestId, ruleCall, uniquePrefix } from "./lua-support";

const HOUR = 3_600_000;
// Its own redis-server: the tests count the EVALSHAs Redis served, which other files running at the same
// time must not add to.
let server: RedisHandle;
let rest: RestServer;
let redis: IORedis;
beforeAll(async () => {
  server = await startRedis();
  rest = await startRestServer({ redisUrl: server.url });
  redis = new IORedis(server.url);
});
afterAll(async () => {
  redis.disconnect();
  await rest.close();
  await server.close();
});
// As on a Redis Cluster or one of several databases, where split decisions are refunded.
const testStore = (prefix: string, splitRefunds = true) =>
  createStore({ url: rest.url, token: rest.token, prefix, timeoutMs: 5000, splitRefunds });

const engineOn = (prefix: string, urls: string[]): Engine =>
  createEngine({
    leases: "off", // the layers below leases, as these tests measure them
    endpoints: urls.map((url) => ({ url, token: rest.token })),
    prefix,
    timeoutMs: 2000,
    // Slot groups as on a Redis Cluster: these tests are about splitting a request by identity.
    cluster: true,
    adminTimeoutMs: 2000,
    // One failure is enough to tell: no breaker delay in these tests.
    decider: { fallbackEntries: 0 },
  });

/** Runs `decide` and waits for whatever it left for waitUntil (the refunds). */
async function decideAndSettle(engine: Engine, calls: RuleCall[], id = requestId()) {
  const background: Promise<unknown>[] = [];
  const decision = await engine.decider.decide(calls, id, { waitUntil: (p) => void background.push(p) });
  await Promise.all(background);
  return { decision, refunds: background.length };
}

const remaining = (prefix: string, call: RuleCall) => peekRemaining(testStore(prefix), call);

describe("grouping", () => {
  it("keeps one identity's calls as one group in the request's order, and splits by identity otherwise", () => {
    const a = ruleCall({ algorithm: "gcra", rule: "a", identityHash: "A" });
    const b = ruleCall({ algorithm: "fixed-window", rule: "b", identityHash: "B" });
    const a2 = ruleCall({ algorithm: "sliding-log", rule: "c", identityHash: "A" });
    const shardOf = rendezvous(["x", "y", "z"]);
    const one = [a, a2];
    expect(groupCalls(one, shardOf, true)).toEqual([{ shard: shardOf("A"), indices: [0, 1], calls: one }]);
    expect(groupCalls([a, b, a2], shardOf, true)).toEqual([
      { shard: shardOf("A"), indices: [0, 2], calls: [a, a2] },
      { shard: shardOf("B"), indices: [1], calls: [b] },
    ]);
  });
});

describe.each(["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"] as Algorithm[])(
  "%s across two identities",
  (algorithm) => {
    it("a request denied by one identity's rule leaves the other's state as it was once the refund landed", async () => {
      const prefix = uniquePrefix(`groups-${algorithm}`);
      const engine = engineOn(prefix, [rest.url]);
      const perIp = ruleCall({ algorithm, rule: "per-ip", limit: 10, periodMs: HOUR });
      const perKey = ruleCall({ algorithm, rule: "per-key", limit: 1, periodMs: HOUR });
      expect((await decideAndSettle(engine, [perIp, perKey])).decision.allowed).toBe(true);
      expect(await remaining(prefix, perIp)).toBe(9);
      // The per-key rule is spent: the next request is denied there, and the per-IP unit comes back.
      const { decision, refunds } = await decideAndSettle(engine, [perIp, perKey]);
      expect(decision.allowed).toBe(false);
      expect(decision.results.map((r) => [r.call.rule, r.outcome])).toEqual([
        ["per-ip", "allowed"],
        ["per-key", "denied"],
      ]);
      expect(refunds).toBe(1);
      expect(await remaining(prefix, perIp)).toBe(9);
      // A bucket's group call asked for the TAT it wrote: its refund gives back only what that proves owed.
      if (algorithm === "token-bucket" || algorithm === "gcra") {
        expect(decision.results[0]?.reservation?.tatUs).toBeGreaterThan(0);
      }
    });
  },
);

describe("a bucket's refund priced by its decision's stamp (the TAT it wrote)", () => {
  // 100 a second (10 ms a unit), a burst of 1000: a fence of 12.5 s, so a split refund is sent at all.
  const bucket = () => ruleCall({ algorithm: "token-bucket", limit: 100, periodMs: 1000, burst: 1000 });
  /** The refund a split decision's allowing group gets (src/resilience/sharded.ts), its span as there. */
  const undo = (store: Store, decision: Decision, id: string, decidedAt: number) =>
    store.refund(consumedCalls(decision), id, -(Date.now() - decidedAt + DEFAULTS.adminTimeoutMs + 1) * 1000);

  it("late, after the bucket filled up and a burst spent the refill: nothing comes back", async () => {
    const prefix = uniquePrefix("groups-stamp-late");
    const store = testStore(prefix);
    const call = bucket();
    const id = requestId();
    const decidedAt = Date.now();
    const decision = await store.decide([{ ...call, cost: 5 }], id, { stamps: true });
    expect(decision.results[0]?.reservation?.tatUs).toBeGreaterThan(0);
    await new Promise((resolve) => setTimeout(resolve, 100)); // the 5 units' 50 ms refilled
    expect((await store.decide([{ ...call, cost: 1000 }], requestId())).allowed).toBe(true);
    const key = stateKey(prefix, call.rule, call.identityHash);
    const tat = await redis.get(key);
    // Without the stamp the refund gave its 50 ms back on top of the burst: 1005 against a burst of 1000.
    expect(await undo(store, decision, id, decidedAt)).toEqual([0]);
    expect(await redis.get(key)).toBe(tat);
  });

  it("prompt: all of it comes back but the moments it took", async () => {
    const prefix = uniquePrefix("groups-stamp-prompt");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "token-bucket", limit: 10, periodMs: 10_000, burst: 10 }); // 1 s a unit
    const id = requestId();
    const decidedAt = Date.now();
    const decision = await store.decide([{ ...call, cost: 5 }], id, { stamps: true });
    expect(await undo(store, decision, id, decidedAt)).toEqual([5]);
    expect(await remaining(prefix, call)).toBe(10);
  });

  it("overlapping: a later refund counts what an earlier one gave back since its decision", async () => {
    const prefix = uniquePrefix("groups-stamp-overlap");
    const store = testStore(prefix);
    const call = bucket();
    const key = stateKey(prefix, call.rule, call.identityHash);
    const [first, second] = [requestId(), requestId()];
    const decidedAt = Date.now();
    // Two split decisions of 50 units (500 ms each) on a full bucket: the second's stamp is 1 s ahead.
    const one = await store.decide([{ ...call, cost: 50 }], first, { stamps: true });
    const two = await store.decide([{ ...call, cost: 50 }], second, { stamps: true });
    // The first is undone at once: its 500 ms go back, and the bucket refills past them in 600 ms.
    // All of it but the moments the refund took (10 ms a unit): a loaded machine takes tens of them.
    const [back = 0] = await undo(store, one, first, decidedAt);
    expect(back).toBeGreaterThan(40);
    expect(back).toBeLessThanOrEqual(50);
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect((await store.decide([{ ...call, cost: 1000 }], requestId())).allowed).toBe(true);
    const tat = await redis.get(key);
    // The second's stamp still lay ~400 ms ahead, but the TAT fell behind the clock meanwhile (the first's
    // refund lowered it): the second's units were refilled and spent by the burst. Without the refund ledger
    // they came back: ~40 units on top of a burst of 1000.
    expect(await undo(store, two, second, decidedAt)).toEqual([0]);
    expect(await redis.get(key)).toBe(tat);
  });

  it("overlapping and prompt, in any order: all come back, and the bucket is as if none had come", async () => {
    const prefix = uniquePrefix("groups-stamp-overlap-prompt");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "token-bucket", limit: 10, periodMs: 10_000, burst: 10 }); // 1 s a unit
    const ids = [requestId(), requestId(), requestId()];
    const decidedAt = Date.now();
    const decisions: Decision[] = [];
    for (const [i, id] of ids.entries())
      decisions.push(await store.decide([{ ...call, cost: i + 2 }], id, { stamps: true }));
    // The latest first: its units lie on top, and an earlier one's refund moves them down, not the other way.
    for (const i of [2, 0, 1]) {
      expect(await undo(store, decisions[i] as Decision, ids[i] as string, decidedAt)).toEqual([i + 2]);
    }
    expect(await remaining(prefix, call)).toBe(10);
    // The ledger holds what each gave back (2, 3 and 4 s, less the moments they took), for 30 s: the furthest
    // a split decision's refund reaches back.
    const ledger = `${stateKey(prefix, call.rule, call.identityHash)}:refunded`;
    const given = (await redis.zrange(ledger, 0, -1)).map((member) => Number(member.split(":")[0]));
    expect(given).toHaveLength(3);
    expect(given.reduce((a, b) => a + b)).toBeGreaterThan(8_900_000);
    expect(await redis.pttl(ledger)).toBeGreaterThan(25_000);
    expect(await redis.pttl(ledger)).toBeLessThanOrEqual(30_000);
  });

  it("a small bucket gets its units back too: its stamp bounds the refund, not the reset fence", async () => {
    // A bucket of 1 s (a unit each 500 ms) has a fence of 1.25 s, shorter than the refund's reach (its 2 s
    // timeout here, 5 s by default): the edge dropped such refunds unsent, and every denied split request kept
    // a unit.
    const prefix = uniquePrefix("groups-small-bucket");
    const engine = engineOn(prefix, [rest.url]);
    const perIp = ruleCall({ algorithm: "gcra", rule: "per-ip", limit: 2, periodMs: 1000 });
    const perKey = ruleCall({ algorithm: "fixed-window", rule: "per-key", limit: 1, periodMs: HOUR });
    expect((await decideAndSettle(engine, [perIp, perKey])).decision.allowed).toBe(true);
    const { decision, refunds } = await decideAndSettle(engine, [perIp, perKey]);
    expect(decision.allowed).toBe(false);
    expect(refunds).toBe(1);
    expect(await remaining(prefix, perIp)).toBe(1);
  });

  // Writes pinned to a later instant lie above the refunded units and must not move (docs/script.md,
  // "Returned units"). Both cases let 58 units through against a burst of 50 before (a review's numbers).
  it("a bucket with a delay: nothing comes back once a later request reserved a slot above the units", async () => {
    const prefix = uniquePrefix("groups-stamp-delay");
    const store = testStore(prefix);
    const call = ruleCall({
      algorithm: "token-bucket",
      limit: 10,
      periodMs: 10_000,
      burst: 10,
      delayMs: 60_000,
    });
    const id = requestId();
    const decidedAt = Date.now();
    const decision = await store.decide([{ ...call, cost: 10 }], id, { stamps: true });
    // Held for its slot, 10 s from now: the split decision's 10 units lie under its.
    const held = await store.decide([{ ...call, cost: 10 }], requestId());
    expect(held.results[0]?.delayMs).toBeGreaterThan(9000);
    expect(await undo(store, decision, id, decidedAt)).toEqual([0]);
    // Given back, the next 10 units would have been held only until the held request leaves: 20 at once.
    expect((await store.decide([{ ...call, cost: 10 }], requestId())).results[0]?.delayMs).toBeGreaterThan(
      19_000,
    );
  });

  it("a bucket with a delay: with no slot reserved above them since, the TAT its decision replaced comes back", async () => {
    const prefix = uniquePrefix("groups-stamp-delay-back");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "gcra", limit: 10, periodMs: 10_000, burst: 10, delayMs: 60_000 });
    const key = stateKey(prefix, call.rule, call.identityHash);
    await store.decide([{ ...call, cost: 10 }], requestId()); // the burst spent: the next request is held
    const before = await redis.get(key);
    const id = requestId();
    const decidedAt = Date.now();
    const decision = await store.decide([{ ...call, cost: 4 }], id, { stamps: true });
    expect(decision.results[0]?.delayMs).toBeGreaterThan(3000);
    expect(await undo(store, decision, id, decidedAt)).toEqual([4]);
    expect(await redis.get(key)).toBe(before);
  });

  it("a per-user bucket with a delay is not charged for split requests another identity denies", async () => {
    // A review's case: a per-user GCRA of 1 a second with a 10 s delay, beside a per-key rule that is spent.
    // Five denied split requests left the next request waiting 5.9 s instead of about 1 s.
    const prefix = uniquePrefix("groups-delay-denied");
    const engine = engineOn(prefix, [rest.url]);
    const perUser = ruleCall({
      algorithm: "gcra",
      rule: "per-user",
      limit: 1,
      periodMs: 1000,
      burst: 1,
      delayMs: 10_000,
    });
    expect((await decideAndSettle(engine, [perUser])).decision.allowed).toBe(true);
    const store = testStore(prefix);
    for (let i = 0; i < 5; i++) {
      // A spent key of its own each time: the same key's denial would be answered from the deny cache.
      const perKey = ruleCall({ algorithm: "fixed-window", rule: "per-key", limit: 1, periodMs: HOUR });
      await store.decide([perKey], requestId());
      const { decision, refunds } = await decideAndSettle(engine, [perUser, perKey]);
      expect(decision.results.map((r) => r.outcome)).toEqual(["allowed", "denied"]);
      expect(refunds).toBe(1);
    }
    const alone = await engine.decider.decide([perUser], requestId());
    expect(alone.results[0]?.delayMs).toBeGreaterThan(0);
    expect(alone.results[0]?.delayMs).toBeLessThanOrEqual(1000);
  });

  it("a request held by a rule with a delay gives back that rule's slot only: a bucket without one keeps its unit", async () => {
    // A give-back restores the TAT its write replaced, which a split refund may have moved since; only rules with
    // a delay get give-backs, and those get no split refunds (a review's sequence gave 53 against a burst of 50).
    const prefix = uniquePrefix("groups-give-back");
    const store = testStore(prefix);
    const held = ruleCall({
      algorithm: "token-bucket",
      rule: "a",
      limit: 1,
      periodMs: 60_000,
      delayMs: 60_000,
    });
    const plain = ruleCall({ algorithm: "token-bucket", rule: "b", limit: 10, periodMs: 1000, burst: 50 });
    await store.decide([{ ...held, burst: 1 }], requestId()); // its one unit spent: the next request waits
    const id = requestId();
    const decision = await store.decide(
      [
        { ...held, burst: 1 },
        { ...plain, cost: 20 },
      ],
      id,
    );
    expect(decision.results[0]?.delayMs).toBeGreaterThan(0);
    const [heldKey, plainKey] = [held, plain].map((call) => stateKey(prefix, call.rule, call.identityHash));
    const plainTat = await redis.get(plainKey as string);
    await giveBack(new EndpointDecider(store), decision, id);
    expect(await redis.get(heldKey as string)).toBe(String(decision.results[0]?.reservation?.previousTatUs));
    expect(await redis.get(plainKey as string)).toBe(plainTat);
  });

  it("a lease of the bucket granted since the decision: nothing comes back (its units are recorded at its end)", async () => {
    const prefix = uniquePrefix("groups-stamp-lease");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "token-bucket", limit: 10, periodMs: 1000, burst: 50 }); // 100 ms a unit
    const [id, control] = [requestId(), requestId()];
    const decidedAt = Date.now();
    const decision = await store.decide([{ ...call, cost: 10 }], id, { stamps: true });
    const lease = await store.decide([call], requestId(), { lease: { units: [30], maxMs: 1000 } });
    expect(lease.results[0]?.lease?.units).toBeGreaterThan(1);
    expect(await undo(store, decision, id, decidedAt)).toEqual([0]);
    // The same on another identity without the lease: all of it comes back.
    const other = { ...call, identityHash: `${call.identityHash}-control` };
    const alone = await store.decide([{ ...other, cost: 10 }], control, { stamps: true });
    expect(await undo(store, alone, control, decidedAt)).toEqual([10]);
  });

  it("a lease's return marks the bucket as its grant does", async () => {
    const prefix = uniquePrefix("groups-stamp-lease-return");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "gcra", limit: 10, periodMs: 1000, burst: 50 });
    const mark = `${stateKey(prefix, call.rule, call.identityHash)}:leased`;
    const granted = (await store.decide([call], requestId(), { lease: { units: [30], maxMs: 1000 } }))
      .results[0];
    const grantMark = Number(await redis.get(mark));
    expect(grantMark).toBeGreaterThan(0);
    expect(await redis.pttl(mark)).toBeLessThanOrEqual(30_000);
    const lease = granted?.lease;
    if (!lease) throw new Error("no lease");
    expect(await store.refund([{ ...call, cost: lease.units - 1 }], requestId(), lease.tatUs)).toEqual([
      lease.units - 1,
    ]);
    expect(Number(await redis.get(mark))).toBeGreaterThan(grantMark);
  });

  it("an engine writes lease marks on a Redis Cluster, and none on one database that is not one", async () => {
    const call = ruleCall({ algorithm: "gcra", limit: 10, periodMs: 1000, burst: 50 });
    for (const cluster of [true, false]) {
      const prefix = uniquePrefix(`groups-marks-${cluster}`);
      const engine = createEngine({
        leases: "off", // the layers below leases, as these tests measure them
        endpoints: [{ url: rest.url, token: rest.token }],
        prefix,
        timeoutMs: 2000,
        cluster,
      });
      const decision = await engine.decider.decide([call], requestId(), {
        lease: { units: [30], maxMs: 1000 },
      });
      expect(decision.results[0]?.lease?.units).toBeGreaterThan(1);
      expect(await redis.exists(`${stateKey(prefix, call.rule, call.identityHash)}:leased`)).toBe(
        cluster ? 1 : 0,
      );
    }
  });

  it("one database alone splits no request: a bucket's lease grant and return leave no key beside its state", async () => {
    const prefix = uniquePrefix("groups-one-database");
    const store = testStore(prefix, false);
    const call = ruleCall({ algorithm: "gcra", limit: 10, periodMs: 1000, burst: 50 });
    const lease = (await store.decide([call], requestId(), { lease: { units: [30], maxMs: 1000 } }))
      .results[0]?.lease;
    if (!lease) throw new Error("no lease");
    expect(await store.refund([{ ...call, cost: lease.units - 1 }], requestId(), lease.tatUs)).toEqual([
      lease.units - 1,
    ]);
    expect(await redis.keys(`${prefix}:*`)).toEqual([stateKey(prefix, call.rule, call.identityHash)]);
  });

  it("a stamp older than the ledger keeps (30 s): nothing comes back, since nothing is known to be owed", async () => {
    const prefix = uniquePrefix("groups-stamp-too-old");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "gcra", limit: 10, periodMs: 10_000, burst: 10 });
    const id = requestId();
    const decision = await store.decide([{ ...call, cost: 2 }], id, { stamps: true });
    const [consumed] = consumedCalls(decision) as [RefundCall];
    const pricedAt = consumed.pricedAt as NonNullable<RefundCall["pricedAt"]>;
    const stamp = pricedAt.stamp as NonNullable<typeof pricedAt.stamp>;
    expect(stamp.writtenAtUs).toBeGreaterThan(0);
    // The same refund with its decision's time put 31 s back, the TAT it wrote still ahead of now.
    const writtenAtUs = (stamp.writtenAtUs ?? 0) - 31_000_000;
    const aged = { ...consumed, pricedAt: { ...pricedAt, stamp: { ...stamp, writtenAtUs } } };
    expect(await store.refund([aged], id, -1_000_000)).toEqual([0]);
    expect(await store.refund(consumedCalls(decision), id, -1_000_000)).toEqual([2]);
  });
});

it("one identity: one script call and no refund, allowed or denied", async () => {
  const prefix = uniquePrefix("groups-one");
  const engine = engineOn(prefix, [rest.url]);
  const calls = [
    ruleCall({ algorithm: "fixed-window", rule: "a", limit: 1, identityHash: "same" }),
    ruleCall({ algorithm: "gcra", rule: "b", limit: 5, identityHash: "same" }),
  ];
  const evalshas = async () =>
    Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(await redis.info("commandstats"))?.[1] ?? 0);
  const before = await evalshas();
  expect((await decideAndSettle(engine, calls)).refunds).toBe(0);
  const denied = await decideAndSettle(engine, calls);
  expect(denied.decision.allowed).toBe(false);
  expect(denied.refunds).toBe(0);
  expect((await evalshas()) - before).toBe(2);
});

it("one Redis that is not a cluster: two identities in one script call, all or nothing, no refund", async () => {
  const prefix = uniquePrefix("groups-single");
  const engine = createEngine({
    endpoints: [{ url: rest.url, token: rest.token }],
    prefix,
    timeoutMs: 2000,
    leases: "off", // the layers below leases, as these tests measure them
  });
  const perIp = ruleCall({ algorithm: "fixed-window", rule: "ip", limit: 5, identityHash: "ip-1" });
  const perKey = ruleCall({ algorithm: "gcra", rule: "key", limit: 1, identityHash: "key-1" });
  const evalshas = async () =>
    Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(await redis.info("commandstats"))?.[1] ?? 0);
  const before = await evalshas();
  expect((await decideAndSettle(engine, [perIp, perKey])).decision.allowed).toBe(true);
  const denied = await decideAndSettle(engine, [perIp, perKey]);
  expect(denied.decision.allowed).toBe(false);
  expect(denied.refunds).toBe(0);
  expect((await evalshas()) - before).toBe(2);
  // The denied request consumed nothing from the per-IP rule: the script's own all-or-nothing.
  expect(await remaining(prefix, perIp)).toBe(4);
});

it("a denial this isolate has cached answers a cross-group request without calling any group", async () => {
  const prefix = uniquePrefix("groups-cached");
  const engine = engineOn(prefix, [rest.url]);
  // No override read (the deny cache keeps no denial given under one).
  const perIp = ruleCall({ algorithm: "gcra", rule: "per-ip", limit: 10, periodMs: HOUR, override: false });
  const perKey = ruleCall({ algorithm: "gcra", rule: "per-key", limit: 1, periodMs: HOUR, override: false });
  await decideAndSettle(engine, [perIp, perKey]);
  expect((await decideAndSettle(engine, [perIp, perKey])).decision.allowed).toBe(false);
  const evalshas = async () =>
    Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(await redis.info("commandstats"))?.[1] ?? 0);
  const before = await evalshas();
  const { decision, refunds } = await decideAndSettle(engine, [perIp, perKey]);
  expect(decision.allowed).toBe(false);
  expect(decision.results.map((r) => [r.source, r.reason])).toEqual([
    ["undecided", "deny_cache"],
    ["deny-cache", "deny_cache"],
  ]);
  expect(refunds).toBe(0);
  expect((await evalshas()) - before).toBe(0);
  expect(await remaining(prefix, perIp)).toBe(9);
});

it("a refund whose span crosses a window edge gives nothing back (never the next window's units)", async () => {
  const prefix = uniquePrefix("groups-age");
  const store = testStore(prefix);
  const call = ruleCall({ algorithm: "fixed-window", limit: 5, periodMs: HOUR });
  const id = requestId();
  await store.decide([call], id);
  // Taken at most 10 ms ago: the same hour, so it comes back.
  expect(await store.refund([call], id, -10_000)).toEqual([1]);
  await store.decide([call], id);
  // Taken at most two hours ago: the hour it was taken in is unknown, so nothing comes back.
  expect(await store.refund([call], id, -2 * HOUR * 1000)).toEqual([0]);
  expect(await remaining(prefix, call)).toBe(4);
});

it("the engine's refund sends each call's units to the database holding its identity, in call order", async () => {
  const prefix = uniquePrefix("groups-route");
  const second = await startRedis();
  const secondRest = await startRestServer({ redisUrl: second.url, token: rest.token });
  const urls = [rest.url, secondRest.url];
  const engine = engineOn(prefix, urls);
  const peekOn = async (shard: number, call: RuleCall) =>
    (await (engine.stores[shard] as Store).decide([call], requestId(), { peek: true })).results[0]?.remaining;
  const shardOf = rendezvous(urls);
  const on = (shard: number) => {
    for (let i = 0; ; i++) if (shardOf(`r${i}`) === shard) return `r${i}`;
  };
  const calls = [0, 1, 0].map((shard, i) =>
    ruleCall({
      algorithm: "token-bucket",
      rule: `r${i}`,
      limit: 10,
      periodMs: HOUR,
      identityHash: on(shard),
    }),
  );
  for (const call of calls)
    await engine.storeOf(call.identityHash).decide([{ ...call, cost: 3 }], requestId());
  try {
    expect(
      await engine.refund(
        calls.map((call, i) => ({ ...call, cost: i + 1 })),
        "",
        0,
      ),
    ).toEqual([1, 2, 3]);
    // Each database holds its own identities' state, refunded; the other one never saw them.
    expect(await Promise.all(calls.map((call, i) => peekOn([0, 1, 0][i] as number, call)))).toEqual([
      8, 9, 10,
    ]);
    expect(await Promise.all(calls.map((call, i) => peekOn([1, 0, 1][i] as number, call)))).toEqual([
      10, 10, 10,
    ]);
  } finally {
    await secondRest.close();
    await second.close();
  }
});

describe("a database down", () => {
  let deadUrl: string;
  beforeAll(async () => {
    // A port that was free a moment ago and is closed now: connections are refused.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    await new Promise((resolve) => server.close(resolve));
    deadUrl = `http://127.0.0.1:${port}`;
  });

  /** An identity `tag<n>` that the live (0) or the dead (1) database holds. */
  const identityOn = (shard: number, tag: string): string => {
    const shardOf = rendezvous([rest.url, deadUrl]);
    for (let i = 0; ; i++) if (shardOf(`${tag}${i}`) === shard) return `${tag}${i}`;
  };

  /** A fail-closed rule whose identity the dead database holds. */
  const deadClosedCall = () =>
    ruleCall({
      algorithm: "fixed-window",
      rule: "dead",
      failure: "closed",
      identityHash: identityOn(1, "d"),
    });

  it("a REST server whose Redis is down answers 503, which the store reads as 'unavailable', not a script error", async () => {
    const port = new URL(deadUrl).port;
    const rest = await startRestServer({ redisUrl: `redis://127.0.0.1:${port}` });
    try {
      const store = createStore({ url: rest.url, token: rest.token, prefix: uniquePrefix("down") });
      const error = await store
        .decide([ruleCall({ algorithm: "gcra" })], requestId())
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreError);
      expect((error as Error).message).toMatch(/^ERR Redis is unavailable/);
      expect((error as StoreError).kind).toBe("unavailable");
    } finally {
      await rest.close();
    }
  });

  it("a fail-closed rule it holds is undecided (503), so the other database's units come back", async () => {
    const prefix = uniquePrefix("groups-down");
    const urls = [rest.url, deadUrl];
    const engine = engineOn(prefix, urls);
    const live = ruleCall({
      algorithm: "token-bucket",
      rule: "live",
      limit: 5,
      periodMs: HOUR,
      identityHash: identityOn(0, "l"),
    });
    const dead = deadClosedCall();
    const { decision, refunds } = await decideAndSettle(engine, [live, dead]);
    expect(decision.results.map((r) => [r.call.rule, r.source])).toEqual([
      ["live", "redis"],
      ["dead", "undecided"],
    ]);
    expect(refunds).toBe(1);
    expect(await remaining(prefix, live)).toBe(5);
    // The live database keeps deciding alone: its identity's own requests are counted.
    expect((await decideAndSettle(engine, [live])).decision.results[0]?.source).toBe("redis");
    expect(await remaining(prefix, live)).toBe(4);
    expect(engine.decider.endpointHealth().map((h) => h.status)).toEqual(["ok", "degraded"]);
  });

  it("a delayed group's request refused by a fail-closed rule it holds tells of no wait", async () => {
    const prefix = uniquePrefix("groups-down-delay");
    const urls = [rest.url, deadUrl];
    const engine = engineOn(prefix, urls);
    // One a second, no burst beyond one: the second request in a second is held for its slot.
    const shaped = ruleCall({
      algorithm: "gcra",
      rule: "shaped",
      limit: 1,
      periodMs: 1000,
      burst: 1,
      delayMs: 3000,
      identityHash: identityOn(0, "s"),
    });
    const dead = deadClosedCall();
    expect((await decideAndSettle(engine, [shaped])).decision.allowed).toBe(true);
    // Alone, the next one would be held (a reserved slot, told by delayMs)...
    const alone = await engine.decider.decide([{ ...shaped, cost: 1 }], requestId(), { waitUntil: () => {} });
    expect(alone.results[0]?.delayMs).toBeGreaterThan(0);
    // ...beside an undecided fail-closed rule the request is refused, its slot refunded: no wait to tell.
    const { decision, refunds } = await decideAndSettle(engine, [shaped, dead]);
    expect(decision.results.map((r) => [r.call.rule, r.source])).toEqual([
      ["shaped", "redis"],
      ["dead", "undecided"],
    ]);
    expect(refunds).toBe(1);
    expect(decision.results[0]?.delayMs).toBeUndefined();
  });

  it("its breaker's log line names it, as health numbers it", async () => {
    const urls = [rest.url, deadUrl];
    const lines: string[] = [];
    const engine = createEngine({
      leases: "off", // the layers below leases, as these tests measure them
      endpoints: urls.map((url) => ({ url, token: rest.token })),
      prefix: uniquePrefix("groups-log"),
      timeoutMs: 2000,
      decider: { fallbackEntries: 0, log: (line) => lines.push(line) },
    });
    const identityHash = identityOn(1, "x");
    // Five failed decisions in a row open the breaker (docs/failure-modes.md).
    for (let i = 0; i < 5; i++)
      await engine.decider.decide([ruleCall({ algorithm: "fixed-window", identityHash })], requestId());
    expect(lines.filter((line) => line.includes("circuit breaker open"))).toEqual([
      expect.stringMatching(/\(endpoint 1\)$/),
    ]);
  });
});
