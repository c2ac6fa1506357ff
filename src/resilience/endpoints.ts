/**
 * The engine over one or several Redis endpoints (docs/scaling-out.md): one store and one resilient decider
 * (its own breaker) per endpoint, identities spread over them by rendezvous hashing, and the sharded decider
 * in front that splits a request into slot groups. With one endpoint: one store and one decider, behind a
 * pass-through for single-identity requests.
 */
import { DEFAULTS } from "../engine/defaults";
import { rendezvous } from "../engine/shards";
import { createStore, type Store } from "../engine/store";
import type { RefundCall } from "../engine/types";
import { createDecider, type DeciderOptions } from "./decider";
import { createShardedDecider, type ShardedDecider } from "./sharded";

/** What {@link createEngine} builds from. */
export interface EngineOptions {
  /** Every Redis REST endpoint, in `UPSTASH_REDIS_REST_URL`'s order; the first also holds shared keys. */
  endpoints: readonly { url: string; token: string }[];
  /** Prefix of every Redis key. */
  prefix: string;
  /** Budget for one whole decision, ms (`RATE_LIMIT_TIMEOUT_MS`). */
  timeoutMs: number;
  /** Budget for one admin command or refund, ms. @default 5000 */
  adminTimeoutMs?: number;
  /** The endpoints are Redis Clusters: split a request by identity (docs/scaling-out.md). @default false */
  cluster?: boolean;
  /** Options of each endpoint's decider (`timeoutMs` is taken from above). */
  decider?: Omit<DeciderOptions, "timeoutMs">;
}

/** The engine's parts, shared by the limiter, the admin API and the live modes. */
export interface Engine {
  /** One store per endpoint, in the endpoints' order. */
  stores: readonly Store[];
  /** The endpoint (index into `stores`) holding an identity's keys. */
  shardOf(identityHash: string): number;
  /** The store holding an identity's keys. */
  storeOf(identityHash: string): Store;
  decider: ShardedDecider;
  /**
   * `Store.refund` across endpoints: each call's units go back to the endpoint holding its identity (one
   * refund call per endpoint concerned); resolves to the units each call got back, in call order.
   */
  refund(calls: RefundCall[], requestId: string, whenUs: number): Promise<number[]>;
}

/**
 * Builds the stores and deciders; nothing here does I/O.
 * @example
 * const engine = createEngine({ endpoints: config.redisEndpoints, prefix: config.prefix, timeoutMs: 200 });
 * const decision = await engine.decider.decide(calls, requestId, { waitUntil });
 */
export function createEngine(options: EngineOptions): Engine {
  const { endpoints, prefix, timeoutMs, adminTimeoutMs = DEFAULTS.adminTimeoutMs } = options;
  // A split decision's refund exists only on a Redis Cluster or over several databases (src/resilience/sharded.ts).
  const splitRefunds = (options.cluster ?? false) || endpoints.length > 1;
  const stores = endpoints.map(({ url, token }) =>
    createStore({ url, token, prefix, timeoutMs, adminTimeoutMs, splitRefunds }),
  );
  // Scored by URL, so the endpoints' order in the binding does not matter (src/engine/shards.ts).
  const shardOf = rendezvous(endpoints.map((e) => e.url));
  // With several endpoints, each decider's log lines (breaker, credentials) say which one, as health does.
  const deciders = stores.map((store, i) =>
    createDecider(store, {
      ...options.decider,
      timeoutMs,
      ...(stores.length > 1 && { endpointName: `endpoint ${i}` }),
    }),
  );
  const decider = createShardedDecider({
    deciders,
    shardOf,
    refund: (shard, calls, requestId, ageUs) => (stores[shard] as Store).refund(calls, requestId, -ageUs),
    refundTimeoutMs: adminTimeoutMs,
    slotGroups: options.cluster ?? false,
  });
  async function refund(calls: RefundCall[], requestId: string, whenUs: number): Promise<number[]> {
    if (stores.length === 1) return (stores[0] as Store).refund(calls, requestId, whenUs);
    const byShard = new Map<number, number[]>();
    calls.forEach((call, i) => {
      const shard = shardOf(call.identityHash);
      byShard.set(shard, [...(byShard.get(shard) ?? []), i]);
    });
    const given = new Array<number>(calls.length).fill(0);
    await Promise.all(
      [...byShard].map(async ([shard, indices]) => {
        const back = await (stores[shard] as Store).refund(
          indices.map((i) => calls[i] as RefundCall),
          requestId,
          whenUs,
        );
        indices.forEach((at, k) => {
          given[at] = back[k] ?? 0;
        });
      }),
    );
    return given;
  }

  return {
    stores,
    shardOf,
    storeOf: (identityHash) => stores[shardOf(identityHash)] as Store,
    decider,
    refund,
  };
}
