/**
 * The engine: the one decision stack, built here and only here, for the Worker (src/worker.ts) and the
 * `rateLimit()` middleware (src/middleware/index.ts) alike. Its layers, and why in this order, are said
 * once, in {@link createEngine}; docs/architecture.md draws them.
 */
import { DEFAULTS } from "../engine/defaults";
import { rendezvous } from "../engine/shards";
import { createStore, type Store } from "../engine/store";
import type { Decision, RefundCall, RuleCall, WaitUntil } from "../engine/types";
import { LeasingDecider } from "../leases";
import { AsyncDecider } from "../leases/async";
import { type DeciderHealth, type DeciderOptions, EndpointDecider, type ResilientDecider } from "./decider";
import { ShardedDecider } from "./sharded";

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
  /** Hot identities decided from leases (`RATE_LIMIT_LEASES`, docs/leases.md). @default "on" */
  leases?: "on" | "off";
  /** The longest life of a lease, ms (`RATE_LIMIT_LEASE_MS`). @default 1000 */
  leaseMs?: number;
  /**
   * Regional databases (`RATE_LIMIT_REGIONS`, docs/regions.md): a request whose `DecideOptions.region` names
   * one is decided there from units the endpoints above (the primary) leased to it. The Worker passes
   * `regionalStage(regions)` (src/regions/decider.ts): passed in, not imported here, so that the middleware,
   * which has no regions, bundles none of it. @default none
   */
  regional?: RegionalStage | undefined;
  /** Some rule is `sync = "async"` (docs/going-global.md, "Async rules"). @default false */
  asyncRules?: boolean;
}

/** Builds the regional stage over the rest of the stack (`inner`) and the endpoints' decider (`primary`). */
export type RegionalStage = (
  inner: EngineDecider,
  primary: ResilientDecider,
  context: { prefix: string; timeoutMs: number },
) => EngineDecider;

/**
 * The engine's decider: the whole stack. `decideNow` answers a request from its leases with no promise
 * (absent with leases off); `endpointHealth` tells the endpoints apart.
 */
export interface EngineDecider extends ResilientDecider {
  /** Each endpoint's health, in the endpoints' order. */
  endpointHealth(): DeciderHealth[];
  decideNow?(calls: RuleCall[], requestId: string, waitUntil?: WaitUntil): Decision | undefined;
  /** Units this isolate holds on lease, unspent (absent with leases off; docs/monitoring.md). */
  leasedUnits?(): number;
}

/** The engine's parts, shared by the limiter, the admin API and the live modes. */
export interface Engine {
  /** One store per endpoint, in the endpoints' order. */
  stores: readonly Store[];
  /** The endpoint (index into `stores`) holding an identity's keys. */
  shardOf(identityHash: string): number;
  /** The store holding an identity's keys. */
  storeOf(identityHash: string): Store;
  /** The whole decision stack (see {@link createEngine}); the limiter, admin and live modes share it. */
  decider: EngineDecider;
  /**
   * `Store.refund` across endpoints: each call's units go back to the endpoint holding its identity (one
   * refund call per endpoint concerned); resolves to the units each call got back, in call order.
   */
  refund(calls: RefundCall[], requestId: string, whenUs: number): Promise<number[]>;
}

/**
 * Builds the whole decision stack; nothing here does I/O. From the request down to Redis:
 *
 * 0. async rules (src/leases/async.ts), when a rule is `sync = "async"`: a request whose every rule is async
 *    is decided here from the isolate's last known state, its units counted afterwards through layer 2 (never
 *    from a lease or a region: their units are no count); every other request passes through (to the regions,
 *    when there are, then the layers below).
 * 1. leases (src/leases): a hot identity holding a lease with room is decided here, with no call below
 *    (`decideNow`). Outermost, so that such a request skips every layer below it; a request it cannot
 *    decide goes down the whole stack, lease asks included, so they obey the budget and the breaker too.
 * 2. the sharded decider (src/resilience/sharded.ts): routes each rule to the endpoint holding its
 *    identity and splits a request into slot groups (all-or-nothing by refund). Above the per-endpoint
 *    deciders, so each endpoint keeps its own breaker and cache: one database down affects only the
 *    identities it holds. With one endpoint and one identity it passes the request through.
 * 3. one resilient decider per endpoint (src/resilience/decider.ts): the deny cache (a recent denial
 *    answers without a call), then the circuit breaker (open: no call), then the store within the
 *    request's budget, then on a failure the fallback limiter or `undecided`. Cheapest answer first;
 *    the breaker before the call it guards; the fallback only once Redis could not answer.
 * 4. one store per endpoint (src/engine/store.ts): the one atomic script call per decision, through the
 *    narrow Redis port (src/engine/redis.ts).
 *
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
  const deciders = stores.map(
    (store, i) =>
      new EndpointDecider(store, {
        ...options.decider,
        timeoutMs,
        ...(stores.length > 1 && { endpointName: `endpoint ${i}` }),
      }),
  );
  const sharded = new ShardedDecider({
    deciders,
    shardOf,
    refund: (shard, calls, requestId, whenUs) => (stores[shard] as Store).refund(calls, requestId, whenUs),
    refundTimeoutMs: adminTimeoutMs,
    slotGroups: options.cluster ?? false,
  });
  const refund = (calls: RefundCall[], requestId: string, whenUs: number) =>
    sharded.refund(calls, requestId, whenUs);
  const local: EngineDecider =
    (options.leases ?? DEFAULTS.leases) === "on"
      ? new LeasingDecider(sharded, { refund, maxMs: options.leaseMs ?? DEFAULTS.leaseMs })
      : sharded;
  // 0. regions (src/regions): a request of a region is decided from its region's pools, which lease from the
  // sharded decider; any other request goes down the stack above.
  const regional: EngineDecider = options.regional?.(local, sharded, { prefix, timeoutMs }) ?? local;
  // Outermost: async rules (see the list above), counted through the sharded decider, the primary's truth.
  const decider: EngineDecider = options.asyncRules ? new AsyncDecider(regional, sharded) : regional;

  return {
    stores,
    shardOf,
    storeOf: (identityHash) => stores[shardOf(identityHash)] as Store,
    decider,
    refund,
  };
}
