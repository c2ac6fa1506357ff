/**
 * One atomic call per request: under a real burst of concurrent requests from several clients, exactly
 * `limit` are admitted for every algorithm, and a request denied by one rule consumes nothing anywhere.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Store } from "../../src/engine/store";
import type { RuleCall } from "../../src/engine/types";
import {
  ALGORITHMS,
  directRedis,
  offsetToWindowStart,
  requestId,
  ruleCall,
  testStore,
  uniquePrefix,
} from "./lua-support";

const CLIENTS = 5;
const REQUESTS = 500;
const HOUR = 3_600_000;

let redis: IORedis;
const prefix = uniquePrefix("atomicity");
let stores: Store[];
beforeAll(() => {
  redis = directRedis();
  stores = Array.from({ length: CLIENTS }, () => testStore(prefix, 20_000));
});
afterAll(() => redis.quit());

/** Fires `REQUESTS` decisions at once, spread over the clients; returns how many were allowed. */
async function burst(calls: (i: number) => RuleCall[], timeOffsetMs: number): Promise<number> {
  const decisions = await Promise.all(
    Array.from({ length: REQUESTS }, (_, i) =>
      (stores[i % CLIENTS] as Store).decide(calls(i), requestId(), { timeOffsetMs }),
    ),
  );
  return decisions.filter((d) => d.allowed).length;
}

describe.each(ALGORITHMS)("%s", (algorithm) => {
  it(`admits exactly 100 of ${REQUESTS} concurrent requests from ${CLIENTS} clients`, async () => {
    const call = ruleCall({ algorithm, limit: 100, periodMs: HOUR });
    const offset = await offsetToWindowStart(redis, HOUR, 1000);
    expect(await burst(() => [call], offset)).toBe(100);
    // And the state agrees: nothing is left.
    const peek = await (stores[0] as Store).decide([call], requestId(), { timeOffsetMs: offset, peek: true });
    expect(peek.results[0]).toMatchObject({ outcome: "denied", remaining: 0 });
  });
});

describe.each(ALGORITHMS)("%s, as production calls it (no override read, no options)", (algorithm) => {
  it(`admits exactly 100 of ${REQUESTS} concurrent requests from ${CLIENTS} clients`, async () => {
    const day = 24 * HOUR;
    const call = ruleCall({ algorithm, limit: 100, periodMs: day, override: false });
    // Real time (a fixed window is then decided without reading the clock): keep the burst in one window.
    const [seconds] = await redis.time();
    const intoDayMs = (Number(seconds) * 1000) % day;
    if (intoDayMs > day - 10_000) await new Promise((resolve) => setTimeout(resolve, day - intoDayMs + 100));
    expect(await burst(() => [call], 0)).toBe(100);
    const peek = await (stores[0] as Store).decide([call], requestId(), { peek: true });
    expect(peek.results[0]).toMatchObject({ outcome: "denied", remaining: 0 });
  });
});

describe("several rules in one call", () => {
  it("consumes nothing from any rule when one rule denies (no partial counting)", async () => {
    const strict = ruleCall({ algorithm: "fixed-window", rule: "strict", limit: 3, periodMs: HOUR });
    const loose = ruleCall({ algorithm: "token-bucket", rule: "loose", limit: 1000, periodMs: HOUR });
    const offset = await offsetToWindowStart(redis, HOUR, 1000);
    const outcomes = [];
    for (let i = 0; i < 5; i++) {
      const d = await (stores[0] as Store).decide([strict, loose], requestId(), { timeOffsetMs: offset });
      outcomes.push([d.allowed, d.results.map((r) => r.outcome)]);
    }
    expect(outcomes).toEqual([
      [true, ["allowed", "allowed"]],
      [true, ["allowed", "allowed"]],
      [true, ["allowed", "allowed"]],
      [false, ["denied", "allowed"]],
      [false, ["denied", "allowed"]],
    ]);
    const looseState = await (stores[0] as Store).decide([loose], requestId(), {
      timeOffsetMs: offset,
      peek: true,
    });
    expect(looseState.results[0]?.remaining).toBe(997);
  });

  it("under a concurrent burst, the looser rule is charged exactly for the requests admitted", async () => {
    const shared = ruleCall({ algorithm: "sliding-window", rule: "shared", limit: 100, periodMs: HOUR });
    const perClient = (i: number) =>
      ruleCall({
        algorithm: "sliding-log",
        rule: "per-client",
        limit: 1000,
        periodMs: HOUR,
        identityHash: `${shared.identityHash}-c${i % CLIENTS}`,
      });
    const offset = await offsetToWindowStart(redis, HOUR, 1000);
    expect(await burst((i) => [shared, perClient(i)], offset)).toBe(100);
    let charged = 0;
    for (let c = 0; c < CLIENTS; c++) {
      const peek = await (stores[0] as Store).decide([perClient(c)], requestId(), {
        timeOffsetMs: offset,
        peek: true,
      });
      charged += 1000 - (peek.results[0]?.remaining ?? 0);
    }
    expect(charged).toBe(100);
  });

  it("counts a monitor rule that allows, and leaves one that would deny untouched", async () => {
    const enforcing = ruleCall({ algorithm: "gcra", rule: "enforcing", limit: 10, periodMs: HOUR });
    const watching = ruleCall({
      algorithm: "sliding-log",
      rule: "watching",
      limit: 2,
      periodMs: HOUR,
      mode: "monitor",
    });
    const results = [];
    for (let i = 0; i < 4; i++) {
      const d = await (stores[0] as Store).decide([enforcing, watching], requestId());
      results.push([d.allowed, d.results[1]?.outcome]);
    }
    expect(results).toEqual([
      [true, "allowed"],
      [true, "allowed"],
      [true, "denied"],
      [true, "denied"],
    ]);
    const peek = await (stores[0] as Store).decide([enforcing], requestId(), { peek: true });
    expect(peek.results[0]?.remaining).toBe(6);
  });
});
