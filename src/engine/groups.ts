/**
 * Slot groups (docs/scaling-out.md): the rule calls of one request that one script call may decide
 * together. Every key of one identity carries its hash as a Redis Cluster hash tag (src/engine/keys.ts), so
 * the calls of one identity share a slot and the calls of different identities (a per-IP and a per-key rule)
 * may not: on a Redis Cluster each identity is a group of its own, decided on the endpoint that holds it;
 * elsewhere one Redis takes keys of any slot, so each endpoint is one group. A request whose rules all key on
 * one identity (the common case) is exactly one group, in the caller's order.
 */
import { traitsOf } from "./algorithms";
import { decisionOf, refundOf } from "./results";
import { type Decision, failsClosed, type RefundCall, type RuleCall, type RuleResult } from "./types";

/** The calls of one identity (on a Redis Cluster) or of one endpoint, decided by one script call on it. */
export interface CallGroup {
  /** The endpoint holding this identity (an index into the store list; 0 with one database). */
  shard: number;
  /** Positions of `calls` in the request's call list, ascending. */
  indices: number[];
  calls: RuleCall[];
}

/** Whether every call keys on one identity: then the request is one group, one script call. */
export function sameIdentity(calls: readonly RuleCall[]): boolean {
  const hash = calls[0]?.identityHash;
  for (let i = 1; i < calls.length; i++) if ((calls[i] as RuleCall).identityHash !== hash) return false;
  return true;
}

/**
 * Splits a request's calls into the groups one script call each can decide, in order of first appearance;
 * each group keeps the request's rule order. One identity: one group holding the very array given (nothing
 * copied).
 * @param shardOf the endpoint of an identity hash (`rendezvous(...)` in src/engine/shards.ts)
 * @param slotGroups `true` on a Redis Cluster: one group per identity, whose keys share a hash slot; `false`:
 *   one group per endpoint, since one Redis takes keys of any slot in one script call
 */
export function groupCalls(
  calls: RuleCall[],
  shardOf: (identityHash: string) => number,
  slotGroups: boolean,
): CallGroup[] {
  const first = calls[0];
  if (first === undefined) return [];
  if (sameIdentity(calls)) {
    return [{ shard: shardOf(first.identityHash), indices: calls.map((_, i) => i), calls }];
  }
  // On a Redis Cluster one group per identity (its keys share a slot); elsewhere one per endpoint.
  const byGroup = new Map<string | number, CallGroup>();
  calls.forEach((call, i) => {
    const shard = shardOf(call.identityHash);
    const groupKey = slotGroups ? call.identityHash : shard;
    let group = byGroup.get(groupKey);
    if (group === undefined) {
      group = { shard, indices: [], calls: [] };
      byGroup.set(groupKey, group);
    }
    group.indices.push(i);
    group.calls.push(call);
  });
  return [...byGroup.values()];
}

/**
 * The request's decision from its groups' decisions: allowed only if every group allowed, results back in
 * the request's rule order.
 */
export function mergeDecisions(
  size: number,
  groups: readonly CallGroup[],
  decisions: readonly Decision[],
  durationMs: number,
): Decision {
  const results = new Array<RuleResult>(size);
  let allowed = true;
  groups.forEach((group, g) => {
    const decision = decisions[g] as Decision;
    if (!decision.allowed) allowed = false;
    group.indices.forEach((at, r) => {
      results[at] = decision.results[r] as RuleResult;
    });
  });
  return decisionOf(allowed, results, durationMs);
}

/**
 * Whether the request will be let through: every group allowed, and no `on` rule with `failure = "closed"`
 * left undecided (that request is answered 503).
 */
export function admitted(decision: Decision): boolean {
  return decision.allowed && decision.results.every((r) => r.source !== "undecided" || !failsClosed(r.call));
}

/**
 * What one group's script call consumed in Redis and a refund must give back: every rule Redis counted,
 * which is every allowing rule of a group Redis allowed (the script writes all of them or none). Concurrency
 * slots are left out: the limiter releases the slots of a request it does not let through anyway. Each is
 * priced at the limits its units were taken under (`refundOf`). A group that timed out may or may not have
 * been counted; it is not refunded (under-admission, never over).
 */
export function consumedCalls(decision: Decision): RefundCall[] {
  if (!decision.allowed) return [];
  const consumed: RefundCall[] = [];
  for (const r of decision.results) {
    if (r.source === "redis" && r.outcome === "allowed" && !traitsOf(r.call.algorithm).holdsSlot) {
      consumed.push(refundOf(r, r.call.cost));
    }
  }
  return consumed;
}
