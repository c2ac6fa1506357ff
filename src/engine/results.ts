/**
 * The one way a `RuleResult` and a `Decision` are made (types in src/engine/types.ts).
 *
 * Every `RuleResult` is made by `ruleResult` and every `Decision` by `decisionOf`, each with all its fields
 * in one order. V8 then gives all results one hidden class, whatever decided them (Redis, a lease, the deny
 * cache, the fallback), and the code that reads them on every request (verdict, headers, observer) stays
 * optimized when a few Redis-decided requests come among thousands decided from leases; results shaped by
 * their source would send that code back to the interpreter each time (`node bench/deopts.mjs` shows it).
 */
import { traitsOf } from "./algorithms";
import type { Decision, RefundCall, RuleResult } from "./types";

/**
 * What a result is made from: `periodMs` and `overridden` may be left out for the call's own terms (only a Redis
 * reply knows of an override's).
 */
export type RuleResultInput = Omit<RuleResult, "periodMs" | "overridden"> & {
  periodMs?: number | undefined;
  overridden?: boolean | undefined;
};

/** A result with every field present, optional ones `undefined` (see above). */
export function ruleResult(r: RuleResultInput): RuleResult {
  // Typed with every key required: a field added to RuleResult and not here fails to compile.
  const all: { [K in keyof Required<RuleResult>]: RuleResult[K] } = {
    call: r.call,
    outcome: r.outcome,
    limit: r.limit,
    periodMs: r.periodMs ?? r.call.periodMs,
    overridden: r.overridden ?? false,
    remaining: r.remaining,
    resetAfterMs: r.resetAfterMs,
    retryAfterMs: r.retryAfterMs,
    source: r.source,
    reason: r.reason ?? r.call.reason,
    lease: r.lease,
    delayMs: r.delayMs,
    reservation: r.reservation,
    blocked: r.blocked,
  };
  return all;
}

/**
 * A decision (see above). A denied one holds its request for nothing: a rule that would have delayed it
 * reserved no slot (the script writes all of a request's rules or none, lua/decide/rules.lua; another group's
 * is refunded where it can be, src/engine/groups.ts), so its result keeps its figures but loses `delayMs`, and no header,
 * `Server-Timing` or log line tells of a wait.
 */
export const decisionOf = (allowed: boolean, results: RuleResult[], durationMs: number): Decision =>
  allowed ? { allowed, results, durationMs } : refusedDecision({ allowed, results, durationMs });

const withoutDelay = (r: RuleResult): RuleResult =>
  r.delayMs ? ruleResult({ ...r, delayMs: undefined }) : r;

/**
 * A decision whose request is refused although no rule denied it (a fail-closed rule of another slot group
 * left undecided, src/resilience/sharded.ts): as for a denied one, no result tells of a wait.
 */
export const refusedDecision = (d: Decision): Decision =>
  d.results.some((r) => r.delayMs) ? { ...d, results: d.results.map(withoutDelay) } : d;

/**
 * The refund of `units` of what `result` consumed (a lease's unspent units, a split decision undone), priced
 * at the limits they were taken under (`RefundCall.pricedAt`). Units taken under an override go back only
 * while it is still in force where its end matters: a fixed window under the override's own period (a counter
 * of the rule's own period may end where theirs did, without having counted them) and a bucket (a reset after
 * the override ended by its `ttl` fences for the rule's own capacity only, which may be shorter). Elsewhere
 * the script's own tests suffice: a sliding window's index, a counter still aimed where it was.
 */
export function refundOf(result: RuleResult, units: number): RefundCall {
  const { call, limit, periodMs } = result;
  const { shape, logic } = traitsOf(call.algorithm);
  const overridden = result.overridden && logic.refundNeedsOverride(periodMs, call.periodMs);
  // A split decision's stamp (a lease's return compares the TAT its lease wrote instead: `when`).
  const stamp = shape === "bucket" && !result.lease ? result.reservation : undefined;
  return { ...call, cost: units, override: false, pricedAt: { limit, periodMs, overridden, stamp } };
}

/**
 * The wait of a request costing `units` more than the one `result` denied: as its algorithm's module works it
 * out (`AlgorithmLogic.waitForMore`: a bucket refills them at its rate; a fixed window's end does not depend on
 * the cost), or where only Redis knows (a sliding window or log drains by its past requests) at worst until the
 * rule is fully reset (`resetAfterMs`, which may be much later than needed). Never earlier than the truth.
 */
export function retryAfterForMore(result: RuleResult, units: number): number {
  if (units <= 0) return result.retryAfterMs;
  const exact = traitsOf(result.call.algorithm).logic.waitForMore(result, units);
  return exact ?? Math.max(result.retryAfterMs, result.resetAfterMs);
}
