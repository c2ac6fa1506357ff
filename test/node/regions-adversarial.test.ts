/**
 * Regions under attack (docs/regions.md, "Why a region never over-admits"): orderings of a region's lease calls,
 * deposits and admin changes that could let a region spend units the primary no longer counts. Real
 * redis-servers (a primary and a region `eu`) behind REST servers; the primary's REST server adds a round trip
 * where a test needs a lease call in flight. Two engines over the same databases stand for two isolates.
 */
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type RedisHandle,
  type RestServer,
  startRedisServers,
  startRestServer,
} from "../../redis-rest/index.mjs";
import { stateKey } from "../../src/engine/keys";
import type { Decision, RuleCall } from "../../src/engine/types";
import { regionalStage } from "../../src/regions/decider";
import { createEngine, type Engine } from "../../src/resilience/engine";
import { redisNowMs, requestId, ruleCall, sleep, uniquePrefix } from "./lua-support";

const TOKEN = "regions-adversarial-token";
/** The primary's round trip for the isolate whose lease call is caught in flight, ms (half each way). */
const SLOW_RTT_MS = 1200;

let servers: RedisHandle[];
let primaryFast: RestServer;
let primarySlow: RestServer;
let eu: RestServer;
let primaryRedis: IORedis;
let euRedis: IORedis;

beforeAll(async () => {
  servers = await startRedisServers(2);
  const [primary, region] = servers as [RedisHandle, RedisHandle];
  [primaryFast, primarySlow, eu] = await Promise.all([
    startRestServer({ redisUrl: primary.url, token: TOKEN }),
    startRestServer({ redisUrl: primary.url, token: TOKEN, rttMs: SLOW_RTT_MS }),
    startRestServer({ redisUrl: region.url, token: TOKEN }),
  ]);
  primaryRedis = new IORedis(primary.url, { maxRetriesPerRequest: 1 });
  euRedis = new IORedis(region.url, { maxRetriesPerRequest: 1 });
}, 60_000);

afterAll(async () => {
  primaryRedis?.disconnect();
  euRedis?.disconnect();
  await Promise.all([primaryFast, primarySlow, eu].map((r) => r?.close()));
  await Promise.all((servers ?? []).map((s) => s.close()));
});

/** An isolate: the Worker's engine over the primary (through `primary`) and the region `eu`. */
const isolate = (prefix: string, primary: RestServer): Engine =>
  createEngine({
    leases: "off", // a region-decided request takes no isolate lease (docs/regions.md)
    endpoints: [{ url: primary.url, token: TOKEN }],
    prefix,
    timeoutMs: 5_000, // generous: this box is shared, and one isolate's primary is 1.2 s away on purpose
    adminTimeoutMs: 5_000,
    decider: { fallbackEntries: 0 },
    regional: regionalStage([{ name: "eu", url: eu.url, token: TOKEN }]),
  });

/** Decides `call` in `eu` and waits for what the decision left for waitUntil (deposits, renewals). */
async function decideInEu(engine: Engine, call: RuleCall): Promise<Decision> {
  const background: Promise<unknown>[] = [];
  const decision = await engine.decider.decide([call], requestId(), {
    region: "eu",
    waitUntil: (p) => void background.push(p),
  });
  await Promise.all(background);
  return decision;
}

/** Makes `eu` look busy for `call`: a pace record of `units` spent in the last second, so a miss asks for many. */
async function busyPace(prefix: string, call: RuleCall, units: number): Promise<void> {
  const pace = `${stateKey(prefix, call.rule, call.identityHash)}:pace`;
  await euRedis.set(pace, `${(await redisNowMs(euRedis)) - 1_000}:${units}`, "PX", 60_000);
}

async function until(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error("timed out");
    await sleep(5);
  }
}

describe("an admin reset racing a region's lease call", () => {
  it("lets no unit granted before the reset into a pool after it: a fresh bucket admits its burst, not more", async () => {
    const prefix = uniquePrefix("reg-reset");
    // 100 an hour: in the few seconds of this test the bucket refills nothing.
    const call = ruleCall({ algorithm: "token-bucket", rule: "api", limit: 100, periodMs: 3_600_000 });
    const a = isolate(prefix, primarySlow); // serves the admin reset while its own lease call is on its way
    const b = isolate(prefix, primaryFast); // another isolate of the region
    await busyPace(prefix, call, 50);

    // A misses in eu and asks the primary (1.2 s away) for the request and a lease: 50 of the 100 (half).
    const inFlight = decideInEu(a, call);
    const key = stateKey(prefix, call.rule, call.identityHash);
    await until(async () => (await primaryRedis.exists(key)) === 1, 5_000); // granted on the primary
    // The reset, as DELETE /__floodgate/keys does it: the state goes, then this isolate forgets the identity
    // (dropping its pools in every region), and every other isolate does when it reads the change.
    await primaryRedis.del(key);
    a.decider.forget(call.rule, call.identityHash);
    b.decider.forget(call.rule, call.identityHash);
    await sleep(100); // the drops have landed; the grant's answer is still on its way back to A
    expect((await inFlight).allowed).toBe(true); // (counted before the reset)

    // Every isolate has heard of the reset. The identity starts afresh: 100, the bucket's burst, and no more.
    let allowed = 0;
    for (let i = 0; i < 160; i++) if ((await decideInEu(b, call)).allowed) allowed++;
    expect(allowed).toBeLessThanOrEqual(100);
  }, 30_000);

  it("lets none in either when the reset is heard by another isolate before the grant lands, and not yet by the asking one", async () => {
    const prefix = uniquePrefix("reg-reset-other");
    const call = ruleCall({ algorithm: "token-bucket", rule: "api", limit: 100, periodMs: 3_600_000 });
    const a = isolate(prefix, primarySlow); // its lease call is on its way; it hears of the reset later
    const b = isolate(prefix, primaryFast); // serves the admin reset: drops the pools in every region at once
    await busyPace(prefix, call, 50);

    const inFlight = decideInEu(a, call);
    const key = stateKey(prefix, call.rule, call.identityHash);
    await until(async () => (await primaryRedis.exists(key)) === 1, 5_000);
    await primaryRedis.del(key);
    b.decider.forget(call.rule, call.identityHash);
    await sleep(100);
    expect((await inFlight).allowed).toBe(true);
    // A's grant has landed in eu after B's drop; A goes quiet (an isolate reads the change on its next request).
    let allowed = 0;
    for (let i = 0; i < 160; i++) if ((await decideInEu(b, call)).allowed) allowed++;
    expect(allowed).toBeLessThanOrEqual(100);
  }, 30_000);
});

describe("a fixed window's lease at the window's edge", () => {
  it("is never spent in the next window: the next window admits its limit, not what the last one left in the pool", async () => {
    const prefix = uniquePrefix("reg-edge");
    const periodMs = 2_000;
    const call = ruleCall({ algorithm: "fixed-window", rule: "api", limit: 20, periodMs });
    const a = isolate(prefix, primaryFast);
    const b = isolate(prefix, primaryFast);
    // 600 ms before a window's edge (windows are aligned to the epoch on the primary's clock).
    const wait = async (intoWindowMs: number) => {
      const now = await redisNowMs(primaryRedis);
      const at = now - (now % periodMs) + intoWindowMs;
      await sleep((at > now + 50 ? at : at + periodMs) - now);
    };
    await wait(1_400);
    await busyPace(prefix, call, 50);
    const first = await decideInEu(a, call); // a miss: the request and a lease of half the window (10)
    expect(first.allowed).toBe(true);
    expect((await decideInEu(a, call)).results[0]?.source).toBe("lease");
    // Next window: whatever the pool still holds (8 units) must not be spent in it.
    await wait(100);
    let allowed = 0;
    for (let i = 0; i < 40; i++) if ((await decideInEu(b, call)).allowed) allowed++;
    expect(allowed).toBeLessThanOrEqual(20);
  }, 30_000);
});

describe("a cost above one", () => {
  it("spends the granting request's cost once: two isolates of a region admit at most the burst's worth of units", async () => {
    const prefix = uniquePrefix("reg-cost");
    const call = ruleCall({ algorithm: "gcra", rule: "api", limit: 60, periodMs: 3_600_000, cost: 3 });
    const a = isolate(prefix, primaryFast);
    const b = isolate(prefix, primaryFast);
    await busyPace(prefix, call, 50);
    const decisions = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const results: boolean[] = [];
        for (let j = 0; j < 2; j++) results.push((await decideInEu(i % 2 ? a : b, call)).allowed);
        return results;
      }),
    );
    const allowed = decisions.flat().filter(Boolean).length;
    expect(allowed).toBeLessThanOrEqual(20); // 60 units of cost 3
    expect(allowed).toBeGreaterThan(0);
  }, 30_000);
});
