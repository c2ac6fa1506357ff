/**
 * Regions (docs/regions.md): a request in a region is decided in that region's database from units the primary
 * leased to it, with one regional script call for all of its rules; when a pool runs short, the primary
 * decides the request and leases the region more in the same call, and the grant goes into the pool after
 * the response. The primary keeps every limit's truth: a region spends only units the primary already
 * counted, each once, within their lease's life.
 */
import { traitsOf } from "../engine/algorithms";
import { decisionOf, ruleResult } from "../engine/results";
import type { DecideOptions, Decision, RuleCall, RuleResult, WaitUntil } from "../engine/types";
import { leasable } from "../leases";
import { LEASE_MARGIN_MS, stateLeftOf } from "../leases/lease";
import type { BreakerOptions } from "../resilience/breaker";
import type { ResilientDecider } from "../resilience/decider";
import type { RegionalStage } from "../resilience/engine";
import { DeciderLayer, type InnerDecider } from "../resilience/layer";
import { BoundedMap } from "../util/bounded-map";
import { type PoolFigures, RegionPools, type SpendReply, type SpentPool } from "./pool";
import { wantedOnMiss, wantedOnRenewal } from "./sizing";

/** The longest life of a region's lease, ms: a window's end, a bucket's quarter and a log's horizon cut it shorter. */
export const REGION_LEASE_MS = 30_000;

/** How many (rule, identity) revocations an isolate remembers: each matters only while a lease call is out. */
const REVOCATIONS = 10_000;

/** Options of {@link RegionalDecider}. */
export interface RegionOptions {
  /** Every region's database. */
  regions: readonly { name: string; url: string; token: string }[];
  prefix: string;
  /** The decision budget, ms (`RATE_LIMIT_TIMEOUT_MS`): the regional call gets half of it at most. */
  timeoutMs: number;
  /** The longest life of a region's lease, ms. @default REGION_LEASE_MS */
  leaseMs?: number;
  /** Each region's database breaker (defaults: docs/failure-modes.md). */
  breaker?: BreakerOptions;
  /** Where a region's breaker opening and closing is logged. Never receives a secret. @default console.warn */
  log?: (line: string) => void;
}

/**
 * A decider that decides a request of a region (`DecideOptions.region`) from that region's pools, over `inner`
 * (which decides every other request: isolate leases, then the primary) and `primary` (the endpoints' decider,
 * which a region's lease calls go to).
 * @example
 * const decider = new RegionalDecider(leasing, sharded, { regions, prefix: "rl", timeoutMs: 200 });
 */
export class RegionalDecider extends DeciderLayer {
  readonly #primary: ResilientDecider;
  readonly #pools: Map<string, RegionPools>;
  readonly #timeoutMs: number;
  readonly #leaseMs: number;
  readonly #log: (line: string) => void;
  /**
   * When this isolate last heard of an admin change to each (rule, identity) (`forget`), edge ms: a grant sent
   * to the primary before then was counted in the state the change reset, so it is never deposited (its pools
   * were dropped before it landed and would live on with units the primary no longer counts).
   */
  readonly #revokedAt = new BoundedMap<string, number>(REVOCATIONS);

  constructor(inner: InnerDecider, primary: ResilientDecider, options: RegionOptions) {
    super(inner);
    this.#primary = primary;
    this.#timeoutMs = options.timeoutMs;
    this.#leaseMs = options.leaseMs ?? REGION_LEASE_MS;
    this.#log = options.log ?? ((line: string) => console.warn(line));
    this.#pools = new Map(
      options.regions.map((region) => [
        region.name,
        new RegionPools(region, options.prefix, options.timeoutMs, this.#leaseMs, options.breaker),
      ]),
    );
  }

  /** An isolate's own leases still answer at once (they are the primary's leases too). */
  decideNow(calls: RuleCall[], requestId: string, waitUntil?: WaitUntil): Decision | undefined {
    return this.inner.decideNow?.(calls, requestId, waitUntil);
  }

  async decide(calls: RuleCall[], requestId: string, opts: DecideOptions = {}): Promise<Decision> {
    const pools = opts.region === undefined ? undefined : this.#pools.get(opts.region);
    // Rules never leased (a held slot, a delay, a block, lease = false…) are the primary's alone.
    if (!pools || calls.length === 0 || !calls.every(leasable))
      return this.inner.decide(calls, requestId, opts);
    const startedAt = Date.now();
    const budgetMs = opts.budgetMs ?? this.#timeoutMs;
    // Half the budget at most: a region that does not answer leaves the primary time to decide.
    const reply = await this.#spend(pools, calls, startedAt + Math.max(1, Math.floor(budgetMs / 2)));
    if (reply?.spent)
      return this.#fromPools(pools, calls, reply.pools, reply.nowMs, requestId, opts, startedAt);
    const { region: _, ...rest } = opts;
    const primaryOpts = { ...rest, budgetMs: Math.max(0, budgetMs - (Date.now() - startedAt)) };
    if (reply === undefined) return this.#primary.decide(calls, requestId, primaryOpts);
    const now = Date.now();
    const units = calls.map((call, i) => wantedOnMiss(call, reply.paces[i], reply.nowMs, this.#leaseMs));
    const decision = await this.#primary.decide(calls, requestId, {
      ...primaryOpts,
      lease: { units, maxMs: this.#leaseMs },
    });
    // The request is decided: its grant goes into the pool after the response.
    const deposited = this.#deposit(pools, decision.results, reply.nowMs, now);
    if (deposited) (opts.waitUntil ?? noWait)(deposited);
    return decision;
  }

  /**
   * Spends `calls` from the region's pools; `undefined` when its database cannot answer by `deadline` (the
   * primary then decides, and leases the region nothing). Behind the region's breaker: once its database has
   * failed several calls in a row, the region's requests go straight to the primary for a cool-down instead of
   * each waiting out half its budget first (docs/regions.md, "When a region's database is down").
   */
  async #spend(pools: RegionPools, calls: RuleCall[], deadline: number): Promise<SpendReply | undefined> {
    const admission = pools.breaker.admit();
    if (admission === "skip") return undefined;
    try {
      const reply = await pools.spend(calls, { deadline });
      if (pools.breaker.state !== "closed") {
        this.#log(`floodgate: region ${pools.name}: its database answers again; its pools decide again`);
      }
      pools.breaker.success();
      return reply;
    } catch {
      if (pools.breaker.failure(admission === "probe")) {
        const ms = pools.breaker.remainingOpenMs();
        this.#log(
          `floodgate: region ${pools.name}: its database does not answer; the primary decides its requests for ${ms} ms`,
        );
      }
      return undefined;
    }
  }

  /** The request's answer from its pools, each already spent; a renewal asked for any pool half spent. */
  #fromPools(
    pools: RegionPools,
    calls: RuleCall[],
    spent: SpentPool[],
    regionNowMs: number,
    requestId: string,
    opts: DecideOptions,
    startedAt: number,
  ): Decision {
    const at = Date.now();
    const results = calls.map((call, i) => {
      const { left, figures: f } = spent[i] as SpentPool;
      return ruleResult({
        call,
        outcome: "allowed",
        limit: f.limit,
        periodMs: f.periodMs,
        overridden: f.overridden,
        // What the primary's state left at the grant, plus the units the region still holds.
        remaining: Math.max(0, f.stateLeft + left),
        resetAfterMs: Math.max(0, f.resetAt - at),
        retryAfterMs: Math.max(0, f.retryAt - at),
        source: "lease",
      });
    });
    const renewing = calls.flatMap((call, i) =>
      (spent[i] as SpentPool).renew ? [{ call, pool: spent[i] }] : [],
    );
    if (renewing.length > 0) {
      const wanted = renewing.map(({ pool }) => wantedOnRenewal(pool as SpentPool, at, this.#leaseMs));
      const renewal = this.#renew(
        pools,
        renewing.map(({ call }) => call),
        wanted,
        requestId,
        regionNowMs,
      ).catch(() => undefined);
      (opts.waitUntil ?? noWait)(renewal);
    }
    return decisionOf(true, results, at - startedAt);
  }

  /**
   * A lease call for no request (cost 0: lua/lease.lua) for pools half spent, then its grant deposited. The
   * primary down: nothing comes, and the region spends what it holds.
   */
  async #renew(
    pools: RegionPools,
    calls: RuleCall[],
    wanted: number[],
    requestId: string,
    regionNowMs: number,
  ): Promise<void> {
    const at = Date.now();
    // A sliding log's members are named by the id: a renewal's must not reuse its request's.
    const leaseId = calls.some((call) => traitsOf(call.algorithm).storesRequestId)
      ? `${requestId}:r`
      : requestId;
    const decision = await this.#primary.decide(
      calls.map((call) => ({ ...call, cost: 0 })),
      leaseId,
      { lease: { units: wanted, maxMs: this.#leaseMs } },
    );
    if (decision.allowed) await this.#deposit(pools, decision.results, regionNowMs, at);
  }

  /**
   * Deposits what `results` leased into the region's pools; `undefined` when nothing was leased. A lease's
   * life is counted from `regionNowMs`, the region's clock before the primary was asked, so a pool ends no
   * later than its lease does on the primary (docs/regions.md); `at` is when (edge ms) the lease call was sent.
   */
  #deposit(
    pools: RegionPools,
    results: RuleResult[],
    regionNowMs: number,
    at: number,
  ): Promise<unknown> | undefined {
    const deposits = results.flatMap((r) => {
      const units = r.lease && r.source === "redis" ? r.lease.units - r.call.cost : 0;
      if (!r.lease || units <= 0) return [];
      // Granted before an admin change this isolate has heard of (a reset, an override): lost, never deposited.
      if (at <= (this.#revokedAt.get(revocationKey(r.call.rule, r.call.identityHash)) ?? -1)) return [];
      const figures: PoolFigures = {
        limit: r.limit,
        periodMs: r.periodMs,
        overridden: r.overridden,
        stateLeft: Math.max(0, stateLeftOf(r)),
        resetAt: at + r.resetAfterMs,
        retryAt: at + r.retryAfterMs,
        depositedAt: at,
      };
      const endsAtMs = regionNowMs + r.lease.lifeMs - LEASE_MARGIN_MS;
      return [pools.deposit(r.call, units, regionNowMs, endsAtMs, figures)];
    });
    // A deposit that fails loses its units (under-admission), never admits one.
    return deposits.length === 0 ? undefined : Promise.all(deposits).catch(() => undefined);
  }

  /** An admin reset or override change: the isolate's leases are revoked, and every region's pools dropped. */
  override forget(rule: string, identityHash: string): void {
    this.#revokedAt.set(revocationKey(rule, identityHash), Date.now());
    this.inner.forget(rule, identityHash);
    for (const pools of this.#pools.values()) pools.drop(rule, identityHash).catch(() => undefined);
  }
}

const revocationKey = (rule: string, identityHash: string): string => `${rule}\u0000${identityHash}`;

/** Background work with no `waitUntil` to keep it: it runs on unawaited (and never rejects). */
const noWait = (promise: Promise<unknown>): void => {
  promise.catch(() => undefined);
};

/**
 * The engine's regional stage for `regions` (`EngineOptions.regional`, src/resilience/engine.ts), or none when
 * there are none.
 */
export function regionalStage(regions: RegionOptions["regions"]): RegionalStage | undefined {
  if (regions.length === 0) return undefined;
  return (inner, primary, context) => new RegionalDecider(inner, primary, { regions, ...context });
}
