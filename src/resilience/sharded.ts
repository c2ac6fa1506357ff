/**
 * One Decider over several Redis endpoints and slot groups (docs/scaling-out.md). Each endpoint has its own
 * resilient decider (breaker, deny cache, fallback): one database down affects only the identities it
 * holds. A request is split into slot groups (src/engine/groups.ts); one group is passed through untouched
 * (one call, as with one database), several are decided in parallel (one round trip of latency) and the request is
 * all-or-nothing without a lock: when it is not let through, what the allowing groups consumed is given back
 * by the script's refund call, sent in the background. Until a refund lands its units are held: the limit
 * may under-admit for a moment, never over-admit (a refund gives back only what it can prove still owed: a
 * window's what its window still counts, a bucket's what its stamps prove; docs/script.md, "Returned units").
 */
import { traitsOf } from "../engine/algorithms";
import { DEFAULTS } from "../engine/defaults";
import { admitted, consumedCalls, groupCalls, mergeDecisions, sameIdentity } from "../engine/groups";
import { decisionOf, refusedDecision, ruleResult } from "../engine/results";
import type {
  DecideOptions,
  Decision,
  RefundCall,
  Reservation,
  RuleCall,
  RuleResult,
  SettledUnits,
  Settlement,
} from "../engine/types";
import { BREAKER_RANK } from "./breaker";
import { type DeciderHealth, deniedFromCache, type ResilientDecider } from "./decider";

/** Options of {@link ShardedDecider}. */
export interface ShardedDeciderOptions {
  /** One decider per endpoint, in `UPSTASH_REDIS_REST_URL`'s order. */
  deciders: readonly ResilientDecider[];
  /** The endpoint (index into `deciders`) holding an identity (`rendezvous` in src/engine/shards.ts). */
  shardOf: (identityHash: string) => number;
  /**
   * Gives back, on endpoint `shard`, what `requestId` consumed for `calls` (`Store.refund` there: `whenUs`
   * negative = taken at most that many µs ago); resolves to the units each call got back. Not bound by the
   * decision budget. A split decision's refund swallows a rejection (the units then stay held until their
   * window or bucket frees them: under-admission only).
   */
  refund: (shard: number, calls: RefundCall[], requestId: string, whenUs: number) => Promise<number[]>;
  /**
   * Longest a refund may take to reach Redis, ms: the refund call's own timeout. It widens the span the
   * script assumes the units were taken in, so a window edge crossed meanwhile refunds nothing rather than
   * the next window's units. @default 5000
   */
  refundTimeoutMs?: number;
  /**
   * The endpoints are Redis Clusters (`RATE_LIMIT_REDIS_CLUSTER`): a request whose rules key on different
   * identities is split by identity (one hash slot each). Otherwise only identities on different endpoints
   * are split, and one endpoint decides all of its rules in one call. @default false
   */
  slotGroups?: boolean;
}

/** A rule not evaluated because the request is already denied by a cached denial, with no figures kept. */
const skipped = (call: RuleCall): RuleResult =>
  ruleResult({
    call,
    outcome: "allowed",
    limit: call.limit,
    remaining: 0,
    resetAfterMs: 0,
    retryAfterMs: 1000,
    source: "undecided",
    reason: "deny_cache",
  });

/**
 * A decider over several endpoints: routes every decision, release and forget to the endpoints holding its
 * identities; `health()` sums them up, `endpointHealth()` tells each apart.
 * @example
 * const decider = new ShardedDecider({ deciders, shardOf: rendezvous(urls), refund });
 * const decision = await decider.decide(calls, requestId, { waitUntil: (p) => ctx.waitUntil(p) });
 */
export class ShardedDecider implements ResilientDecider {
  readonly #deciders: readonly ResilientDecider[];
  readonly #refund: ShardedDeciderOptions["refund"];
  readonly #refundTimeoutMs: number;
  readonly #slotGroups: boolean;
  /** One endpoint: every identity is its. */
  readonly #single: boolean;
  /** The endpoint (index into `#deciders`) holding an identity. */
  readonly #route: (identityHash: string) => number;

  constructor(options: ShardedDeciderOptions) {
    const {
      deciders,
      shardOf,
      refund,
      refundTimeoutMs = DEFAULTS.adminTimeoutMs,
      slotGroups = false,
    } = options;
    if (deciders.length === 0) throw new Error("ShardedDecider: at least one decider is required");
    this.#deciders = deciders;
    this.#refund = refund;
    this.#refundTimeoutMs = refundTimeoutMs;
    this.#slotGroups = slotGroups;
    this.#single = deciders.length === 1;
    this.#route = this.#single ? () => 0 : shardOf;
  }

  async decide(calls: RuleCall[], requestId: string, opts: DecideOptions = {}): Promise<Decision> {
    const first = calls[0];
    // One identity (the common case), or one Redis that is not a cluster: one call, as without sharding.
    if (first === undefined || sameIdentity(calls) || (this.#single && !this.#slotGroups)) {
      return this.#deciderOf(first === undefined ? 0 : this.#route(first.identityHash)).decide(
        calls,
        requestId,
        opts,
      );
    }
    // A denial this isolate has cached answers at once, as for one group: no group is called and counted
    // only to be refunded. Not when a rule left undecided would be fail-closed (the decider's own rule).
    const cached = calls.map((call) => this.cachedDenial(call));
    // Another rule of such a request: the figures its endpoint kept, else skipped.
    const denied = deniedFromCache(calls, cached, (call) => this.cachedFigures(call) ?? skipped(call));
    if (denied) return decisionOf(false, denied, 0);
    const groups = groupCalls(calls, this.#route, this.#slotGroups);

    // No leases across groups: a refund of a denied split request could take back leased units with the
    // request's own (a sliding log's members are named by request id), and a lease must never outlive its units.
    const groupOpts: DecideOptions = { ...opts };
    delete groupOpts.lease;
    // A group with a bucket asks for its stamps (the TAT it wrote, and when): a refund gives back only what
    // they prove still owed.
    const stamped: DecideOptions = { ...groupOpts, stamps: true };
    const startedMs = performance.now();
    const decisions = await Promise.all(
      groups.map((group) =>
        this.#deciderOf(group.shard).decide(
          group.calls,
          requestId,
          group.calls.some((call) => traitsOf(call.algorithm).shape === "bucket") ? stamped : groupOpts,
        ),
      ),
    );
    const elapsedMs = performance.now() - startedMs;
    const decision = mergeDecisions(calls.length, groups, decisions, elapsedMs);
    if (!admitted(decision)) {
      // The units were taken after `startedMs`; the refund runs within its timeout of now.
      const ageUs = Math.ceil((elapsedMs + this.#refundTimeoutMs + 1) * 1000);
      const refunds: Promise<unknown>[] = [];
      groups.forEach((group, g) => {
        const consumed = consumedCalls(decisions[g] as Decision);
        if (consumed.length > 0) {
          refunds.push(this.#refund(group.shard, consumed, requestId, -ageUs).catch(() => undefined));
        }
      });
      if (refunds.length > 0) {
        const all = Promise.all(refunds).then(() => undefined);
        if (opts.waitUntil) opts.waitUntil(all);
      }
      // The request is not held. A delayed group's slot goes back with the refund while no later request of
      // that identity was admitted (a compare-and-set, as a give-back: docs/script.md, "Returned units").
      return refusedDecision(decision);
    }
    return decision;
  }

  release(call: RuleCall, requestId: string, reservation?: Reservation): Promise<void> {
    return this.#deciderOf(this.#route(call.identityHash)).release(call, requestId, reservation);
  }

  /**
   * Units consumed earlier given back, each call's on the endpoint holding its identity (one refund call per
   * endpoint concerned); resolves to the units each call got back, in call order. Units back in Redis may
   * turn a denial this isolate cached wrong: it asks Redis again next time (a rule counting by status:
   * docs/counting.md).
   */
  async refund(calls: RefundCall[], requestId: string, whenUs: number): Promise<number[]> {
    const given = await byShard(
      calls,
      (call) => this.#route(call.identityHash),
      (shard, part) => this.#refund(shard, part, requestId, whenUs),
      0,
    );
    calls.forEach((call, i) => {
      if ((given[i] ?? 0) > 0) this.forget(call.rule, call.identityHash);
    });
    return given;
  }

  /** Settlements sent to the endpoint holding each identity (docs/settle.md). */
  settle(settlements: Settlement[], requestId: string, decidedAtMs: number): Promise<SettledUnits[]> {
    return byShard(
      settlements,
      (s) => this.#route(s.result.call.identityHash),
      (shard, part) => {
        const own = this.#deciderOf(shard);
        return own.settle ? own.settle(part, requestId, decidedAtMs) : Promise.reject(new Error("no settle"));
      },
      { applied: 0 },
    );
  }

  forget(rule: string, identityHash: string): void {
    this.#deciderOf(this.#route(identityHash)).forget(rule, identityHash);
  }

  forgetBlocks(): void {
    for (const decider of this.#deciders) decider.forgetBlocks();
  }

  cachedDenial(call: RuleCall): RuleResult | undefined {
    return this.#deciderOf(this.#route(call.identityHash)).cachedDenial(call);
  }

  cachedFigures(call: RuleCall): RuleResult | undefined {
    return this.#deciderOf(this.#route(call.identityHash)).cachedFigures(call);
  }

  /** Each endpoint's health, in `deciders`' order. */
  endpointHealth(): DeciderHealth[] {
    return this.#deciders.map((d) => d.health());
  }

  health(): DeciderHealth {
    if (this.#single) return this.#deciderOf(0).health();
    // The worst endpoint speaks for all: degraded if any is, the breaker state of the worst one.
    const each = this.endpointHealth();
    let worst = each[0] as DeciderHealth;
    for (const h of each) if (BREAKER_RANK[h.breaker] > BREAKER_RANK[worst.breaker]) worst = h;
    const latest = each
      .map((h) => h.lastFailure)
      .filter((f) => f !== null)
      .sort((a, b) => a.agoMs - b.agoMs)[0];
    return {
      status: each.some((h) => h.status === "degraded") ? "degraded" : "ok",
      breaker: worst.breaker,
      breakerRemainingMs: Math.max(...each.map((h) => h.breakerRemainingMs)),
      consecutiveFailures: Math.max(...each.map((h) => h.consecutiveFailures)),
      lastFailure: latest ?? null,
      credentials: each.some((h) => h.credentials === "rejected")
        ? "rejected"
        : each.every((h) => h.credentials === "accepted")
          ? "accepted"
          : "unknown",
      errors: {
        timeout: sum(each, (h) => h.errors.timeout),
        unavailable: sum(each, (h) => h.errors.unavailable),
        auth: sum(each, (h) => h.errors.auth),
        script: sum(each, (h) => h.errors.script),
      },
      breakerOpens: sum(each, (h) => h.breakerOpens),
    };
  }

  #deciderOf(shard: number): ResilientDecider {
    return this.#deciders[shard] as ResilientDecider;
  }
}

const sum = <T>(items: readonly T[], of: (item: T) => number): number =>
  items.reduce((total, item) => total + of(item), 0);

/**
 * `items` sent to the endpoint holding each (one call per endpoint concerned), their outcomes in the items'
 * order (`missing` where an endpoint answered short). An endpoint that fails rejects the whole (the caller
 * logs it; a settlement's reservations stand, a refund's units stay held).
 */
async function byShard<T, R>(
  items: readonly T[],
  shardOf: (item: T) => number,
  send: (shard: number, part: T[]) => Promise<R[]>,
  missing: R,
): Promise<R[]> {
  const indicesOf = new Map<number, number[]>();
  items.forEach((item, i) => {
    const shard = shardOf(item);
    indicesOf.set(shard, [...(indicesOf.get(shard) ?? []), i]);
  });
  if (items.length === 0) return [];
  if (indicesOf.size === 1) return send(shardOf(items[0] as T), [...items]);
  const out = new Array<R>(items.length);
  await Promise.all(
    [...indicesOf].map(async ([shard, indices]) => {
      const done = await send(
        shard,
        indices.map((i) => items[i] as T),
      );
      indices.forEach((at, k) => {
        out[at] = done[k] ?? missing;
      });
    }),
  );
  return out;
}
