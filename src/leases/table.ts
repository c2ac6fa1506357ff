/**
 * The isolate's leases: units a Redis decision took for one (rule, identity) ahead of time, spent here
 * by later requests without a Redis call (lua/lease.lua), and how hot each
 * (rule, identity) is, which decides how many units the next decision asks for, and the lease calls on their
 * way. Bounded; plain values but for each call's `landed` promise, which other requests await: it runs under
 * its request's `waitUntil` (it lands even if that request is cancelled) and is awaited within the waiter's
 * budget (workerd runs the waiter on in its own request's context). The records it holds, and when a lease
 * serves a request, are src/leases/lease.ts.
 */
import type { RuleCall, RuleResult } from "../engine/types";
import { BoundedMap } from "../util/bounded-map";
import { type Flight, fits, type Lease, sameTerms, stateLeftOf } from "./lease";

/** How hot one (rule, identity) is here: requests seen in the current second and the one before. */
interface Heat {
  second: number;
  count: number;
  previous: number;
}

/**
 * A lease call not landed after this long is taken for lost (its request's context gone with it): no one
 * waits for it any more, and another may be asked. Beyond the default decision budget (200 ms), but
 * `RATE_LIMIT_TIMEOUT_MS` accepts up to 60 s: with a budget above 10 s, a call still on its way then is
 * taken for lost too, so a request may send a second lease call beside it and the burst no longer waits
 * for the first. Both grants are taken (one as the spare): more units parked, never one request too many.
 */
const FLIGHT_LOST_MS = 10_000;

/** The lease table of one isolate. */
export class LeaseTable {
  private readonly leases: BoundedMap<string, Lease>;
  /** A renewal taken while the current lease still had room: spent once the current one is not. */
  private readonly spares: BoundedMap<string, Lease>;
  private readonly heat: BoundedMap<string, Heat>;
  private readonly flights: BoundedMap<string, Flight>;
  /** Leases put aside with units left (replaced or promoted over): returned by the next sweep. */
  private retired: Lease[] = [];
  /**
   * When each (rule, identity) was last revoked: a grant sent before then, whose answer was still on its
   * way, is never taken (the state it came from may be gone).
   */
  private readonly revokedAt: BoundedMap<string, number>;

  /** @param capacity most (rule, identity) pairs held, leases and heat each. */
  constructor(capacity: number) {
    this.leases = new BoundedMap(capacity);
    this.spares = new BoundedMap(capacity);
    this.heat = new BoundedMap(capacity);
    this.flights = new BoundedMap(capacity);
    this.revokedAt = new BoundedMap(capacity);
  }

  /** The live lease of `call` with room for its cost, if any (its spare, once the current one has none). */
  usable(call: RuleCall, now: number): Lease | undefined {
    const key = keyOf(call.rule, call.identityHash);
    const lease = this.leases.get(key);
    if (lease !== undefined && fits(lease, call, now)) return lease;
    const spare = this.spares.get(key);
    if (spare === undefined || !fits(spare, call, now)) return undefined;
    this.spares.delete(key);
    this.leases.set(key, spare);
    if (lease !== undefined && lease.left > 0) this.retired.push(lease);
    return spare;
  }

  /**
   * The lease of `call` (the current one, else its spare) under the same terms, live until `until`, that holds
   * some units but fewer than its cost, if any: the request may spend them and ask Redis only for the rest.
   */
  short(call: RuleCall, until: number): Lease | undefined {
    const key = keyOf(call.rule, call.identityHash);
    for (const lease of [this.leases.get(key), this.spares.get(key)]) {
      if (lease !== undefined && lease.left > 0 && until < lease.expiresAt && sameTerms(lease.call, call)) {
        return lease;
      }
    }
    return undefined;
  }

  /**
   * Puts back `units` a request took from `lease` that the script then did not count (denied, answered 503, a
   * monitor rule that would deny): spent by later requests while it lives, returned by the sweep once it is
   * put aside or expired. Never into a lease revoked since: its units are not returned.
   */
  restore(lease: Lease, units: number): void {
    const key = keyOf(lease.call.rule, lease.call.identityHash);
    if (lease.sentAt <= (this.revokedAt.get(key) ?? -1)) return;
    const held = this.leases.get(key) === lease || this.spares.get(key) === lease;
    // Swept or displaced with nothing left meanwhile: in no list, so the next sweep must find it.
    if (!held && lease.left === 0) this.retired.push(lease);
    lease.left += units;
  }

  /** Whether `call` has a spare lease waiting (then no renewal is needed). */
  hasSpare(call: RuleCall): boolean {
    return this.spares.has(keyOf(call.rule, call.identityHash));
  }

  /**
   * What a client of `lease` (the current one) may still spend at most, as far as this isolate knows: what
   * Redis's state leaves, plus the units held here, its own and its spare's.
   */
  available(lease: Lease, now: number): number {
    if (this.spares.size === 0) return lease.stateLeft + lease.left; // the common case: no key to build
    const spare = this.spares.get(keyOf(lease.call.rule, lease.call.identityHash));
    const held = spare !== undefined && fits(spare, lease.call, now) ? spare.left : 0;
    return lease.stateLeft + lease.left + held;
  }

  /**
   * Takes in what a Redis answer says is left of one (rule, identity): a live lease of it under the same
   * terms never reports more after it. Call it with every result Redis gave, a grant's included.
   */
  observe(result: RuleResult): void {
    if (result.source !== "redis") return;
    const key = keyOf(result.call.rule, result.call.identityHash);
    const left = stateLeftOf(result);
    for (const lease of [this.leases.get(key), this.spares.get(key)]) {
      if (lease !== undefined && left < lease.stateLeft && sameTerms(lease.call, result.call)) {
        lease.stateLeft = left;
      }
    }
  }

  /** Counts one request of `call` and says how many units its next decision should ask for. */
  wanted(call: RuleCall, now: number, maxMs: number): number {
    const key = keyOf(call.rule, call.identityHash);
    const second = Math.floor(now / 1000);
    let heat = this.heat.get(key);
    if (heat === undefined || heat.second !== second) {
      // A new second: a new record, set as the most recent entry (within a second it is only counted).
      const previous = heat !== undefined && heat.second === second - 1 ? heat.count : 0;
      heat = { second, count: 0, previous };
      this.heat.set(key, heat);
    }
    heat.count++;
    // Requests per second seen here: the last whole second, or this one so far if it is already busier.
    const rate = Math.max(heat.previous, heat.count);
    if (rate < 2) return call.cost; // cold: decided one by one, exactly as without leases
    // A quarter of what the rate would spend in a whole life: a lease is usually spent well before it
    // expires, so few units wait for a return while other isolates are being denied.
    return call.cost * Math.max(1, Math.ceil((rate * maxMs) / 4000));
  }

  /** Whether a decision asking for a lease of this (rule, identity) is already on its way. */
  asking(call: RuleCall, now: number): boolean {
    return this.flight(call, now) !== undefined;
  }

  /**
   * Records the lease call of `call` sent at `now`: `landed` settles once its grants are in the table, with
   * the rules they are of.
   */
  ask(call: RuleCall, landed: Promise<ReadonlySet<string>>, now: number): void {
    const key = keyOf(call.rule, call.identityHash);
    const granted = landed.then(
      (rules) => rules.has(call.rule),
      () => false,
    );
    const flight: Flight = { landed: granted, sentAt: now, waiting: 0 };
    this.flights.set(key, flight);
    // Registered before any waiter's: a waiter wakes to a table without this flight.
    void flight.landed.then(() => this.lost(call, flight));
  }

  /** Forgets `flight`, the lease call of `call`'s (rule, identity), landed or taken for lost: another may be asked. */
  lost(call: RuleCall, flight: Flight): void {
    const key = keyOf(call.rule, call.identityHash);
    if (this.flights.get(key) === flight) this.flights.delete(key);
  }

  /** The lease call of `call`'s (rule, identity) on its way, if any. */
  flight(call: RuleCall, now: number): Flight | undefined {
    const key = keyOf(call.rule, call.identityHash);
    const flight = this.flights.get(key);
    if (flight === undefined || now - flight.sentAt < FLIGHT_LOST_MS) return flight;
    this.flights.delete(key);
    return undefined;
  }

  /**
   * Takes a new lease: the spare when the current one is live with room (a renewal), else the current one.
   * A lease it displaces with units left is retired, to be returned.
   */
  put(lease: Lease, now: number): void {
    const key = keyOf(lease.call.rule, lease.call.identityHash);
    // Granted before a revoke this isolate has already heard of.
    if (lease.sentAt <= (this.revokedAt.get(key) ?? -1)) return;
    const current = this.leases.get(key);
    const into =
      current !== undefined && current.left > 0 && now < current.expiresAt ? this.spares : this.leases;
    const displaced = into.get(key);
    into.set(key, lease);
    if (displaced !== undefined && displaced.left > 0) this.retired.push(displaced);
  }

  /**
   * Drops the leases of one identity under `rule`, and any grant for it sent by `now` and still on its way.
   * Their units are never returned: the state they came from may be gone.
   */
  revoke(rule: string, identityHash: string, now: number): void {
    const key = keyOf(rule, identityHash);
    this.revokedAt.set(key, now);
    for (const map of [this.leases, this.spares]) {
      const lease = map.get(key);
      if (lease === undefined) continue;
      lease.left = 0;
      map.delete(key);
    }
    for (const lease of this.retired) {
      if (lease.call.rule === rule && lease.call.identityHash === identityHash) lease.left = 0;
    }
  }

  /** Units this isolate holds unspent in live leases and spares at `now` (a gauge: docs/monitoring.md). */
  outstanding(now: number): number {
    let units = 0;
    for (const map of [this.leases, this.spares]) {
      for (const lease of map.values()) if (now < lease.expiresAt) units += lease.left;
    }
    return units;
  }

  /** Removes and returns every lease that expired by `now`, and every retired one. */
  expired(now: number): Lease[] {
    const out = this.retired;
    this.retired = [];
    for (const map of [this.leases, this.spares]) {
      for (const [key, lease] of map) {
        if (now < lease.expiresAt) continue;
        map.delete(key);
        out.push(lease);
      }
    }
    return out;
  }
}

const keyOf = (rule: string, identityHash: string): string => `${rule}\u0000${identityHash}`;
