/**
 * The records of leasing (docs/leases.md): one lease, the units a Redis decision took ahead of time for a
 * (rule, identity), and which requests it may serve; one lease call on its way. The isolate's table of them
 * is src/leases/table.ts.
 */
import { type LeaseGrant, type RuleCall, type RuleResult, sameLimits } from "../engine/types";

/** One live lease. */
export interface Lease {
  /** The call it was granted under: a request under other limits, mode or override flag cannot spend it. */
  readonly call: RuleCall;
  /** The id its units were taken under (sliding-log members are named after it). */
  readonly leaseId: string;
  readonly grant: LeaseGrant;
  /** Local clock, ms, before the granting call was sent: spends happen only before `expiresAt`. */
  readonly sentAt: number;
  readonly expiresAt: number;
  /** Units still here to spend (the grant minus the granting request's cost, minus later spends). */
  left: number;
  /** The granting decision's figures for this rule, for honest headers. */
  readonly result: RuleResult;
  /**
   * What Redis's state leaves (this lease's units and any other taken), the least of every Redis answer for
   * this (rule, identity) under the same terms since the grant, this isolate's: a request Redis decided
   * meanwhile (one whose cost did not fit, or another lease taken) is in it (`LeaseTable.observe`).
   */
  stateLeft: number;
}

/**
 * The lease call of one (rule, identity) on its way to Redis: one at a time, so a burst does not park
 * units in many leases, and the burst's other requests wait for it instead of asking Redis one by one.
 */
export interface Flight {
  /** Settles once the call's grant is in the table: whether it leased this (rule, identity) anything. */
  readonly landed: Promise<boolean>;
  /** Local clock, ms, when the call was sent. */
  readonly sentAt: number;
  /** Requests waiting for it; each counts itself out when it resumes. */
  waiting: number;
}

/** Spends end this much before the lease does: the isolate's clock may lag Redis's by a little. */
export const LEASE_MARGIN_MS = 5;

/** What Redis's state leaves by a result: a grant's figures count its own units as still to spend. */
export const stateLeftOf = (result: RuleResult): number =>
  result.remaining - (result.lease ? result.lease.units - result.call.cost : 0);

/** Whether `lease` may serve `call` at `now`: live, with room for its cost, under the same terms. */
export const fits = (lease: Lease, call: RuleCall, now: number): boolean =>
  now < lease.expiresAt && lease.left >= call.cost && sameTerms(lease.call, call);

/** A lease serves only requests under the terms it was granted under. */
export function sameTerms(a: RuleCall, b: RuleCall): boolean {
  return sameLimits(a, b) && a.mode === b.mode && (a.override ?? true) === (b.override ?? true);
}
