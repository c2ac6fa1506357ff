/**
 * What the engine leaves in Redis: one key per identity and rule, every key with a TTL bounded by its
 * period, and no identity able to reach another identity's (or rule's, or tenant's) keys.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashIdentity, identityHashOf, overrideKey, stateKey } from "../../src/engine/keys";
import {
  ALGORITHMS,
  directRedis,
  keysUnder,
  requestId,
  ruleCall,
  testStore,
  uniquePrefix,
} from "./lua-support";

let redis: IORedis;
beforeAll(() => {
  redis = directRedis();
});
afterAll(() => redis.quit());

describe("after a run", () => {
  it("every key has a TTL of at most its period (two for sliding-window), and there is one key per identity", async () => {
    const prefix = uniquePrefix("ttl");
    const store = testStore(prefix);
    const periodMs = 3_600_000; // an hour: no window edge falls inside the run
    const calls = ALGORITHMS.flatMap((algorithm) =>
      [1, 2, 3].map((n) =>
        ruleCall({ algorithm, rule: algorithm, limit: 3, periodMs, identityHash: `who${n}` }),
      ),
    );
    // Allowed, denied and multi-rule requests, as a real run would send.
    for (let i = 0; i < 5; i++) {
      await store.decide(calls, requestId());
      for (const call of calls) await store.decide([call], requestId(), { timeOffsetMs: i * 1000 });
    }

    const keys = await keysUnder(redis, prefix);
    expect(keys.sort()).toEqual(calls.map((c) => stateKey(prefix, c.rule, c.identityHash)).sort());
    for (const key of keys) {
      const ttl = await redis.pttl(key);
      // A sliding-log key also outlives its newest member by up to min(period, 10 s): a lease's members
      // are scored at the lease's end, and no later write may expire them early (lua/decide/sliding-log.lua).
      const bound = key.includes(":sliding-window:")
        ? 2 * periodMs
        : key.includes(":sliding-log:")
          ? periodMs + Math.min(periodMs, 10_000)
          : periodMs;
      expect({ key, hasTtl: ttl > 0 }).toEqual({ key, hasTtl: true });
      expect(ttl).toBeLessThanOrEqual(bound);
    }
  });

  it("writes nothing for a denied or peeked request", async () => {
    const prefix = uniquePrefix("nowrite");
    const store = testStore(prefix);
    const blocker = ruleCall({ algorithm: "fixed-window", rule: "blocker", limit: 1, cost: 2 });
    for (const algorithm of ALGORITHMS) {
      const call = ruleCall({ algorithm, limit: 2, periodMs: 60_000 });
      await store.decide([call], requestId(), { peek: true });
      await store.decide([{ ...call, cost: 3 }, blocker], requestId());
      await store.decide([blocker, call], requestId());
    }
    expect(await keysUnder(redis, prefix)).toEqual([]);
  });
});

describe("a rule that changes algorithm under the same name", () => {
  it("starts the identity afresh instead of failing on state of another shape", async () => {
    const store = testStore(uniquePrefix("reshape"));
    const identityHash = "same-identity";
    // (token-bucket and gcra are the same state, so they are kept apart here)
    const sequence = [
      "fixed-window",
      "sliding-log",
      "sliding-window",
      "concurrency",
      "token-bucket",
      "sliding-log",
      "gcra",
      "fixed-window",
    ] as const;
    for (const algorithm of sequence) {
      const call = ruleCall({ algorithm, limit: 3, periodMs: 60_000, identityHash });
      const decision = await store.decide([call], requestId());
      expect([algorithm, decision.allowed, decision.results[0]?.remaining]).toEqual([algorithm, true, 2]);
    }
  });
});

describe("hostile identities", () => {
  const hostile = [
    "",
    ":",
    "a:b",
    "a",
    "{a}",
    "{}",
    "*",
    "?",
    "[a-z]",
    "x\r\n*3",
    "rl:override:r:x",
    "🦀 ünïcödé",
    "\u0000",
    "k".repeat(10 * 1024),
    "k".repeat(10 * 1024 - 1),
  ];

  it("hash to distinct, fixed-shape key parts", async () => {
    const hashes = await Promise.all(hostile.map(hashIdentity));
    expect(new Set(hashes).size).toBe(hostile.length);
    for (const hash of hashes) expect(hash).toMatch(/^[A-Za-z0-9_-]{22}$/);
    for (const hash of hashes) {
      expect(stateKey("rl", "rule", hash)).toMatch(/^rl:rule:\{[A-Za-z0-9_-]{22}\}$/);
      expect(overrideKey("rl", "rule", hash)).toMatch(/^rl:override:rule:\{[A-Za-z0-9_-]{22}\}$/);
      expect(identityHashOf(stateKey("rl", "rule", hash))).toBe(hash);
      expect(identityHashOf(overrideKey("rl", "rule", hash))).toBe(hash);
    }
  });

  it("each count only against themselves", async () => {
    const prefix = uniquePrefix("hostile");
    const store = testStore(prefix);
    const hashes = await Promise.all(hostile.map(hashIdentity));
    // Exhaust the first identity; every other one still has its whole limit.
    const [first, ...others] = hashes.map((identityHash) =>
      ruleCall({ algorithm: "fixed-window", limit: 2, periodMs: 3_600_000, identityHash }),
    );
    if (!first) throw new Error("unreachable");
    for (let i = 0; i < 3; i++) await store.decide([first], requestId());
    const decision = await store.decide(others, requestId(), { peek: true });
    expect(decision.results.map((r) => r.remaining)).toEqual(others.map(() => 2));
    // And all keys are where they belong: under this prefix, one per identity that spent something.
    const keys = await keysUnder(redis, prefix);
    expect(keys).toEqual([stateKey(prefix, "r", first.identityHash)]);
  });
});
