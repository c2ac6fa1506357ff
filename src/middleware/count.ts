/**
 * Counting by the response (docs/counting.md): a rule with `count = { status = [...] }` takes a request's
 * units at admission, like any rule, so requests in flight hold them and no instance can admit more than the
 * limit; once the response's status is known, the units of every such rule that does not count that status
 * go back, in one refund call (per endpoint) in the background (`waitUntil`). A request's units are charged,
 * then, only when its status matches: never more than `limit` matching responses per period.
 */
import type { StatusCount } from "../config/count";
import { DEFAULTS } from "../engine/defaults";
import { refundOf } from "../engine/results";
import type { Decider, Decision, RuleResult, WaitUntil } from "../engine/types";
import type { SettleReport } from "./settled";

/** The status list of each rule that counts by status, by rule name. */
export type StatusCounts = ReadonlyMap<string, StatusCount>;

const NOTHING_HELD: readonly RuleResult[] = [];

/**
 * The results whose units the request holds until its status is known: allowed by Redis in a decision that
 * let the request through (only then was anything written), under a rule that counts by status. A degraded
 * answer (fallback, undecided) took nothing Redis can tell apart, and keeps what it may have taken.
 */
export function heldUntilStatus(decision: Decision, counts: StatusCounts): readonly RuleResult[] {
  if (counts.size === 0 || !decision.allowed) return NOTHING_HELD;
  if (!decision.results.some((r) => counts.has(r.call.rule))) return NOTHING_HELD;
  return decision.results.filter(
    (r) => r.outcome === "allowed" && r.source === "redis" && counts.has(r.call.rule),
  );
}

/**
 * Gives back, in the background, the units of every held result whose rule does not count `status`.
 * `decidedAtMs`: the edge's clock just before the decision was sent; the units were taken after it, so the
 * refund says "at most this long ago" and a window edge crossed since gives nothing back (never the next
 * window's units: docs/counting.md, "Exactness"). A failed refund keeps the units: under-admission only.
 * `report`: told what came back once Redis has answered.
 */
export function giveBackUncounted(
  decider: Decider,
  held: readonly RuleResult[],
  counts: StatusCounts,
  status: number,
  requestId: string,
  decidedAtMs: number,
  waitUntil: WaitUntil,
  report?: SettleReport,
): void {
  if (held.length === 0 || !decider.refund) return;
  const back = held.filter((r) => !counts.get(r.call.rule)?.counts(status));
  if (back.length === 0) return;
  // The refund runs within its timeout of now (the store's admin budget), so this bounds its span.
  const ageUs = Math.ceil((Date.now() - decidedAtMs + DEFAULTS.adminTimeoutMs + 1) * 1000);
  const calls = back.map((r) => refundOf(r, r.call.cost));
  const startedAt = Date.now();
  const told = (given: readonly number[] | undefined) =>
    report?.({
      status,
      durationMs: Date.now() - startedAt,
      rules: back.map((result, i) => ({
        result,
        reserved: result.call.cost,
        ...(given
          ? { outcome: "given-back" as const, applied: -(given[i] ?? 0), cost: 0 }
          : { outcome: "failed" as const, applied: 0 }),
      })),
    });
  waitUntil(
    decider.refund(calls, requestId, -ageUs).then(
      (given) => told(given),
      () => told(undefined),
    ),
  );
}
