/**
 * Between decisions and the isolate's lease table (README: "Leases"): a request decided from its leases
 * (`decideFromLeases`, and `afterDenial` for a Redis denial a concurrent lease call overtook), a request
 * sent to Redis with what a lease too short for it holds (`spendShort`), and a Redis decision taken in
 * (`take` its grants, `observed` its figures). When each runs is src/leases/index.ts.
 */
import { decisionOf, ruleResult } from "../engine/results";
import type { Decision, RuleCall } from "../engine/types";
import { LEASE_MARGIN_MS, type Lease, stateLeftOf } from "./lease";
import type { LeaseTable } from "./table";

/** The decision of `calls` from `leases` (each with room for its call's cost): the cost is spent there. */
export function decideFromLeases(
  table: LeaseTable,
  calls: RuleCall[],
  leases: Lease[],
  at: number,
): Decision {
  const results = calls.map((call, i) => {
    const lease = leases[i] as Lease;
    lease.left -= call.cost;
    const elapsed = at - lease.sentAt;
    const r = lease.result;
    return ruleResult({
      call,
      outcome: "allowed",
      limit: r.limit,
      periodMs: r.periodMs, // an override's, when it changed the period: the lease was granted under it
      overridden: r.overridden,
      // Never more than Redis's last answer left, plus the units still held here.
      remaining: Math.max(0, table.available(lease, at)),
      resetAfterMs: r.resetAfterMs, // spends since only move a full reset later: never earlier than the truth
      retryAfterMs: Math.max(0, r.retryAfterMs - elapsed),
      source: "lease",
    });
  });
  return decisionOf(true, results, 0);
}

/** The calls a request sends to Redis, and how to put back the leased units it spent beside them. */
export interface ShortSpend {
  readonly calls: RuleCall[];
  /** Puts the units back: call it when Redis denied the request, which then consumes nothing. */
  readonly undo: () => void;
}

/**
 * A request going to Redis whose rule (one without a usable lease, `leases[i]` undefined) holds a lease with
 * fewer units than its cost spends them first and asks Redis only for the rest: those units are already
 * counted there. Without this, the isolate's own lease would deny its client until the window's end, though
 * the client has the units. Its results then carry the call Redis decided (`cost` what Redis took).
 */
export function spendShort(
  table: LeaseTable,
  calls: RuleCall[],
  leases: (Lease | undefined)[],
  at: number,
): ShortSpend {
  let taken: { lease: Lease; units: number }[] | undefined; // most requests take none and make no array
  const sent = calls.map((call, i) => {
    const lease = leases[i] === undefined ? table.short(call, at) : undefined;
    if (lease === undefined) return call;
    const units = Math.min(lease.left, call.cost - 1);
    lease.left -= units;
    taken ??= [];
    taken.push({ lease, units });
    return { ...call, cost: call.cost - units };
  });
  if (taken === undefined) return { calls, undo: () => undefined };
  const spent = taken;
  return {
    calls: sent,
    undo: () => {
      for (const { lease, units } of spent) table.restore(lease, units);
    },
  };
}

/** A Redis decision's figures, taken in by the live leases of its rules (`LeaseTable.observe`). */
export function observed(table: LeaseTable, decision: Decision): Decision {
  for (const result of decision.results) table.observe(result);
  return decision;
}

/** Puts the leases `decision` granted into the table; returns the rules they are of. */
export function take(table: LeaseTable, decision: Decision, leaseId: string, sentAt: number): Set<string> {
  const rules = new Set<string>();
  for (const result of decision.results) {
    if (!result.lease || result.source !== "redis") continue;
    rules.add(result.call.rule);
    const lease: Lease = {
      call: result.call,
      leaseId,
      grant: result.lease,
      sentAt,
      expiresAt: sentAt + result.lease.lifeMs - LEASE_MARGIN_MS,
      left: result.lease.units - result.call.cost,
      result,
      stateLeft: stateLeftOf(result),
    };
    table.put(lease, Date.now());
  }
  observed(table, decision); // a lease already here under another grant: the new one's units are taken too
  return rules;
}

/**
 * A denial by Redis wrote nothing, so the units `short` spent of this isolate's leases go back. If meanwhile
 * a concurrent request of this isolate leased every rule with room (a burst: its lease call went out
 * first), the request is admitted from those units, which Redis already counted. Without this, a burst
 * into one isolate would park the quota in leases and deny.
 */
export function afterDenial(
  table: LeaseTable,
  decision: Decision,
  calls: RuleCall[],
  short: ShortSpend,
): Decision {
  if (decision.allowed) return decision;
  short.undo();
  if (!decision.results.every((r) => r.source === "redis")) return decision;
  const at = Date.now();
  const leases = calls.map((call) => table.usable(call, at));
  if (!leases.every((lease) => lease !== undefined)) return decision;
  return decideFromLeases(table, calls, leases as Lease[], at);
}
