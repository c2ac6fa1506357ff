/**
 * Between decisions and the isolate's lease table (docs/leases.md): a request decided from its leases
 * (`decideFromLeases`), a request sent to Redis with what a lease too short for it holds (`spendShort`), a
 * Redis decision taken in (`take` its grants, `observed` its figures) and made the request's answer
 * (`answerOf`). When each runs is src/leases/index.ts.
 */
import { admitted } from "../engine/groups";
import { decisionOf, retryAfterForMore, ruleResult } from "../engine/results";
import { capacityOf, type Decision, type RuleCall } from "../engine/types";
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

/** The calls a request sends to Redis, and the leased units it spent beside them. */
export interface ShortSpend {
  readonly calls: RuleCall[];
  /** Units taken from a lease, by the index of the rule's call; empty for most requests. */
  readonly taken: readonly { index: number; lease: Lease; units: number }[];
}

/**
 * A request going to Redis whose rule (one without a usable lease, `leases[i]` undefined) holds a lease with
 * fewer units than its cost spends them first and asks Redis only for the rest: those units are already
 * counted there. Without this, the isolate's own lease would deny its client until the window's end, though
 * the client has the units. Only a lease that outlives `answeredBy`, the latest the decision may come back
 * (so the script runs while the lease lives: its units and the rest count in one window); `undefined` (no
 * budget known) spends none. Its results then carry the call Redis decided (`cost` what Redis took).
 */
export function spendShort(
  table: LeaseTable,
  calls: RuleCall[],
  leases: (Lease | undefined)[],
  answeredBy: number | undefined,
): ShortSpend {
  const taken: { index: number; lease: Lease; units: number }[] = [];
  if (answeredBy === undefined) return { calls, taken };
  const sent = calls.map((call, index) => {
    const lease = leases[index] === undefined ? table.short(call, answeredBy) : undefined;
    // Not for a cost above what the rule can ever grant (Redis answers it, with its one-period wait), nor
    // under an override's limits, whose capacity the edge does not know.
    if (lease === undefined || lease.result.overridden || call.cost > capacityOf(call)) return call;
    const units = Math.min(lease.left, call.cost - 1);
    lease.left -= units;
    taken.push({ index, lease, units });
    return { ...call, cost: call.cost - units };
  });
  return { calls: taken.length === 0 ? calls : sent, taken };
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
 * The request's answer from a Redis decision of `short.calls`. What the script did not count goes back to the
 * leases `short` spent of: every rule's, for a request not let through (denied, or undecided and failing
 * closed), and a monitor rule's that would deny. A denial then says when the WHOLE cost may pass: the units
 * put back may never reach Redis (a bucket's return lapses once another isolate moved its state). And if
 * meanwhile a concurrent request of this isolate leased every rule with room (a burst: its lease call went
 * out first), a denied request is admitted from those units, which Redis already counted. Without this, a
 * burst into one isolate would park the quota in leases and deny.
 */
export function answerOf(
  table: LeaseTable,
  decision: Decision,
  calls: RuleCall[],
  short: ShortSpend,
): Decision {
  const through = admitted(decision);
  for (const { index, lease, units } of short.taken) {
    if (!through || decision.results[index]?.outcome !== "allowed") table.restore(lease, units);
  }
  if (through) return decision;
  const answer = short.taken.length === 0 ? decision : wholeCostRetry(decision, short);
  if (answer.allowed || !answer.results.every((r) => r.source === "redis")) return answer;
  const at = Date.now();
  const leases = calls.map((call) => table.usable(call, at));
  if (!leases.every((lease) => lease !== undefined)) return answer;
  return decideFromLeases(table, calls, leases as Lease[], at);
}

/** A denial of a request that sent Redis only part of its cost: each denied rule's wait for the whole cost. */
function wholeCostRetry(decision: Decision, short: ShortSpend): Decision {
  const results = decision.results.map((r, index) => {
    const units = short.taken.find((t) => t.index === index)?.units;
    if (units === undefined || r.outcome !== "denied") return r;
    return ruleResult({ ...r, retryAfterMs: retryAfterForMore(r, units) });
  });
  return decisionOf(decision.allowed, results, decision.durationMs);
}
