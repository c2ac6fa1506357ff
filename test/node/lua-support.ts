/**
 * Shared by the engine tests: a store on the run's REST server, a direct ioredis connection for looking at
 * keys (SCAN, TTL), and rule calls with identities no other test uses.
 */
import { Redis as IORedis } from "ioredis";
import { inject } from "vitest";
import { createStore, type Store } from "../../src/engine/store";
import type { RuleCall } from "../../src/engine/types";
import type { ResilientDecider } from "../../src/resilience/decider";

export { ALGORITHMS } from "../../src/engine/types";

let unique = 0;
/** A key prefix no other test (or test file) uses. */
export const uniquePrefix = (name: string): string =>
  `t-${name}-${process.pid}-${Date.now().toString(36)}-${(unique++).toString(36)}`;

/** A store on the run's REST server. The budget is generous: this box is shared and noisy. */
export function testStore(prefix: string, timeoutMs = 5000): Store {
  return createStore({ url: inject("redisRestUrl"), token: inject("redisRestToken"), prefix, timeoutMs });
}

/** A direct connection to the run's redis-server, for assertions the REST API should not be needed for. */
export function directRedis(): IORedis {
  return new IORedis(inject("redisUrl"), { lazyConnect: false, maxRetriesPerRequest: 1 });
}

/** What one more unit of `call` would find left, looked at without writing (the admin API's peek). */
export async function peekRemaining(store: Store, call: RuleCall): Promise<number> {
  return (
    (await store.decide([{ ...call, cost: 1 }], requestId(), { peek: true })).results[0]?.remaining ?? NaN
  );
}

/** One rule call; `identityHash` defaults to a fresh identity. */
export function ruleCall(partial: Partial<RuleCall> & Pick<RuleCall, "algorithm">): RuleCall {
  const limit = partial.limit ?? 5;
  return {
    rule: "r",
    limit,
    periodMs: 60_000,
    burst: limit,
    cost: 1,
    mode: "on",
    failure: "open",
    identityHash: `id${unique++}`,
    ...partial,
  };
}

let requests = 0;
/** A request id no other request of this run has. */
export const requestId = (): string => `req-${process.pid}-${requests++}`;

/** Redis's clock, ms. */
export async function redisNowMs(redis: IORedis): Promise<number> {
  const [seconds, micros] = await redis.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

/** A time offset that puts the script's clock `intoWindowMs` after the start of a window of `periodMs`. */
export async function offsetToWindowStart(
  redis: IORedis,
  periodMs: number,
  intoWindowMs = 50,
): Promise<number> {
  const now = await redisNowMs(redis);
  return periodMs - (now % periodMs) + intoWindowMs;
}

/** Every key under `prefix`, via SCAN. */
export async function keysUnder(redis: IORedis, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = "0";
  do {
    const [next, batch] = await redis.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== "0");
  return keys;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * `inner` with its `decide` replaced (the replacement may call `inner.decide`), every other method passed
 * through: a test's window on the calls an isolate's decider makes.
 */
export function withDecide(
  inner: ResilientDecider,
  { decide }: Pick<ResilientDecider, "decide">,
): ResilientDecider {
  return {
    decide,
    release: (call, requestId, reservation) => inner.release(call, requestId, reservation),
    health: () => inner.health(),
    forget: (rule, identityHash) => inner.forget(rule, identityHash),
    forgetBlocks: () => inner.forgetBlocks(),
    cachedDenial: (call) => inner.cachedDenial(call),
    cachedFigures: (call) => inner.cachedFigures(call),
  };
}
