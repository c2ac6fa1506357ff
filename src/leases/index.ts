/**
 * Leases: hot identities decided with no Redis call, and never one request too many.
 * A decision for a (rule, identity) this isolate sees often asks the script for more units than the
 * request's cost (lua/lease.lua); later requests spend them here until they run out or the
 * lease expires; what is left at expiry goes back to Redis (src/leases/returns.ts). A request is decided
 * here only when EVERY one of its rules holds a live lease with room for its cost: otherwise one Redis
 * call decides all of them, as always (all-or-nothing stays). docs/leases.md.
 */

import { traitsOf } from "../engine/algorithms";
import { DEFAULTS } from "../engine/defaults";
import type { DecideOptions, Decision, RuleCall, WaitUntil } from "../engine/types";
import { GUARD_MS } from "../resilience/decider";
import { DeciderLayer, type InnerDecider } from "../resilience/layer";
import { within } from "../util/timer";
import { answerOf, decideFromLeases, observed, spendShort, take } from "./decisions";
import type { Flight, Lease } from "./lease";
import { createSweep, type Refund } from "./returns";
import { LeaseTable } from "./table";

/** Options of {@link LeasingDecider}. */
export interface LeaseOptions {
  /** Gives unused units back at a lease's expiry; absent = they are not returned (only expire). */
  refund?: Refund | undefined;
  /** The longest life of a lease, ms (`RATE_LIMIT_LEASE_MS`). @default 1000 */
  maxMs?: number;
}

/**
 * How many lease calls in a row a request may wait for (each one Redis round trip, all within its budget)
 * before it asks Redis itself: a burst into a cold identity is served by a few calls instead of one each.
 */
const MAX_WAITS = 3;

/** Most (rule, identity) pairs an isolate tracks: leases, spares, heat and lease calls, each. */
const TRACKED_PAIRS = 10_000;

/**
 * Whether a call may ever be leased: only a leasable algorithm's (never a held slot: concurrency, shed), never
 * a rule with `lease = false`, never a rule with a `delay` (the script refuses it one: its give-backs and
 * refunds compare TATs).
 */
export const leasable = (call: RuleCall): boolean =>
  traitsOf(call.algorithm).leasable && call.lease !== false && !((call.delayMs ?? 0) > 0);

/**
 * A decider that decides hot identities from leases, over `inner`, which decides everything else; `forget` (an
 * admin reset or override change, from the change log) also revokes that identity's leases. A mode switch needs
 * no hook: a lease serves only requests in the mode it was granted in.
 * @example
 * const decider = new LeasingDecider(new EndpointDecider(store), { refund: store.refund, maxMs: 1000 });
 */
export class LeasingDecider extends DeciderLayer {
  readonly #maxMs: number;
  readonly #table = new LeaseTable(TRACKED_PAIRS);
  /** Gives back what expired leases left unspent (src/leases/returns.ts). */
  readonly #sweep: ReturnType<typeof createSweep>;

  constructor(inner: InnerDecider, options: LeaseOptions = {}) {
    super(inner);
    this.#maxMs = options.maxMs ?? DEFAULTS.leaseMs;
    // Units back in Redis may turn a cached denial wrong: this isolate asks Redis again next time.
    this.#sweep = createSweep(this.#table, options.refund, (rule, identityHash) =>
      inner.forget(rule, identityHash),
    );
  }

  /** The request decided from its leases when every rule holds one with room; else `undefined`. */
  decideNow(calls: RuleCall[], requestId: string, waitUntil?: WaitUntil): Decision | undefined {
    const at = Date.now();
    this.#sweep(at, waitUntil);
    if (calls.length === 0 || !calls.every(leasable)) return undefined;
    const leases = calls.map((call) => this.#table.usable(call, at));
    if (!leases.every((lease) => lease !== undefined)) return undefined;
    return this.#spend(calls, leases as Lease[], at, requestId, waitUntil);
  }

  async decide(calls: RuleCall[], requestId: string, opts: DecideOptions = {}): Promise<Decision> {
    const table = this.#table;
    const maxMs = this.#maxMs;
    const known = this.decideNow(calls, requestId, opts.waitUntil);
    if (known) return known;
    // A request with a rule that is never leased (a concurrency slot) always goes to Redis, so leasing its
    // other rules would only park units where this request cannot spend them.
    if (calls.length === 0 || !calls.every(leasable))
      return observed(table, await this.inner.decide(calls, requestId, opts));
    let at = Date.now();
    let leases = calls.map((call) => table.usable(call, at));
    // Rules without room whose lease call is on its way (a burst, or a renewal not back yet): wait for it
    // rather than ask Redis one by one, while it leased something and within the request's budget.
    const startedAt = at;
    let backlog = 0; // requests still waiting for the same calls: the next lease is sized for them too
    let spent = false; // the whole budget waited out (the clock may read a ms short of it)
    for (
      let waits = 0;
      waits < MAX_WAITS && opts.budgetMs !== undefined && leases.includes(undefined);
      waits++
    ) {
      const flying = calls.filter((_, i) => leases[i] === undefined);
      const flights = flying.map((call) => table.flight(call, at));
      if (!flights.every((flight): flight is Flight => flight !== undefined)) break;
      for (const flight of flights) flight.waiting++;
      const granted = await this.#landingWithin(flights, opts.budgetMs - (at - startedAt));
      backlog = 0;
      for (const flight of flights) backlog = Math.max(backlog, --flight.waiting);
      at = Date.now();
      leases = calls.map((call) => table.usable(call, at));
      if (granted === undefined) {
        // Not landed within this request's budget: lost with its request's context. No one waits for it
        // any more; this request asks Redis with what is left of its budget (none: the decider applies the
        // failure policy without a call).
        flying.forEach((call, i) => {
          table.lost(call, flights[i] as Flight);
        });
        spent = true;
        break;
      }
      if (!granted.every(Boolean) || at - startedAt >= opts.budgetMs) break;
    }
    if (leases.every((lease) => lease !== undefined)) {
      return this.#spend(calls, leases as Lease[], at, requestId, opts.waitUntil);
    }
    const budget = spent
      ? { ...opts, budgetMs: 0 }
      : at === startedAt || opts.budgetMs === undefined
        ? opts
        : { ...opts, budgetMs: Math.max(0, opts.budgetMs - (at - startedAt)) };
    // The latest a Redis answer may come: the budget, then the decider's grace.
    const answeredBy = budget.budgetMs === undefined ? undefined : at + budget.budgetMs + GUARD_MS;
    const short = spendShort(table, calls, leases, answeredBy);
    const sent = short.calls;
    // Rules that still hold a lease with room keep it; the others may ask for one, one request at a time,
    // for the requests still waiting behind this one too. None does while another of the request's rules is
    // cold (one key hot, the other new each time: an API key from changing IPs), with no lease and none on
    // its way: requests like this one go to Redis anyway, and leased units would only be parked.
    let cold = false;
    const units = sent.map((call, i) => {
      const wanted = Math.max(table.wanted(call, at, maxMs), call.cost * (1 + backlog));
      if (leases[i] || table.asking(call, at)) return call.cost;
      if (wanted === call.cost) cold = true;
      return wanted;
    });
    const asking = cold ? [] : sent.filter((call, i) => (units[i] as number) > call.cost);
    if (asking.length === 0) {
      return answerOf(table, observed(table, await this.inner.decide(sent, requestId, budget)), calls, short);
    }
    const decided = this.inner.decide(sent, requestId, { ...budget, lease: { units, maxMs } });
    const landed = decided.then((decision) => take(table, decision, requestId, at));
    for (const call of asking) table.ask(call, landed, at);
    // Others may be waiting for it: it lands even if this request is cancelled (its client gone).
    opts.waitUntil?.(landed.catch(() => undefined));
    const decision = await decided;
    await landed; // its grant in the table before this request is answered (a caller's next one spends it)
    return answerOf(table, decision, calls, short);
  }

  /**
   * Spends the request's cost from `leases`. Half spent, no spare yet, none on its way, and plenty left in
   * Redis: the next lease is fetched in the background, so a hot identity never waits on Redis (and its
   * concurrent requests do not all go there when it runs out). Near the end of the quota, no renewal: the
   * last units go one by one. Only the rules that need one: a fresh lease of another rule would only park
   * units in a spare.
   */
  #spend(
    calls: RuleCall[],
    leases: Lease[],
    at: number,
    requestId: string,
    waitUntil: WaitUntil | undefined,
  ): Decision {
    const table = this.#table;
    const wanted = calls.map((call) => table.wanted(call, at, this.#maxMs));
    const decision = decideFromLeases(table, calls, leases, at);
    let renewing: number[] | undefined; // indexes into `calls`: most requests renew nothing and make no array
    calls.forEach((call, i) => {
      const lease = leases[i] as Lease;
      const units = lease.grant.units;
      if (
        2 * lease.left < units &&
        // Plenty left: what Redis leaves plus the lease's own units (the grant's figure, or less since).
        lease.stateLeft + units - lease.call.cost >= 4 * units &&
        !table.hasSpare(call) &&
        !table.asking(call, at)
      ) {
        renewing ??= [];
        renewing.push(i);
      }
    });
    if (renewing && waitUntil) {
      const units = renewing.map((i) => wanted[i] as number);
      waitUntil(
        this.#renewal(
          renewing.map((i) => calls[i] as RuleCall),
          units,
          requestId,
        ),
      );
    }
    return decision;
  }

  /**
   * Whether each flight leased something, once all have landed; `undefined` if that takes longer than `ms`
   * (a lease call another request sent is awaited only as long as this request may wait on Redis).
   */
  #landingWithin(flights: Flight[], ms: number): Promise<boolean[] | undefined> {
    // `landed` never rejects (LeaseTable.ask).
    return within(Promise.all(flights.map((flight) => flight.landed)), ms);
  }

  /**
   * A lease call for no request (cost 0: lua/lease.lua), run in the background. A rule
   * with nothing left to lease gets none and nothing is counted; the current lease is spent meanwhile.
   */
  async #renewal(calls: RuleCall[], wanted: number[], requestId: string): Promise<void> {
    const at = Date.now();
    const renewing = calls.map((call) => ({ ...call, cost: 0 }));
    // State that stores ids (a sliding log's members) names them after the lease's: a renewal must not reuse
    // the request's.
    const leaseId = calls.some((call) => traitsOf(call.algorithm).storesRequestId)
      ? `${requestId}:r`
      : requestId;
    const table = this.#table;
    const lease = { units: wanted, maxMs: this.#maxMs };
    const landed = this.inner.decide(renewing, leaseId, { lease }).then((decision) => {
      if (decision.allowed) return take(table, decision, leaseId, at);
      observed(table, decision); // nothing leased, but what Redis says is left still bounds the current lease
      return new Set<string>();
    });
    for (const call of calls) table.ask(call, landed, at);
    // The decider never throws; a renewal that fails leaves the isolate to ask on the request path.
    await landed.catch(() => undefined);
  }

  /** Units this isolate holds on lease and has not spent yet, over every rule (no Redis call). */
  override leasedUnits(): number {
    return this.#table.outstanding(Date.now());
  }

  override forget(rule: string, identityHash: string): void {
    this.#table.revoke(rule, identityHash, Date.now());
    this.inner.forget(rule, identityHash);
  }
}
