/**
 * Applies the failure policy and the modes to a `Decision` (README "Rules", "Responses"; docs/failure-modes.md): 503 if a matched `on`
 * rule that fails closed could not be decided; 429 if an `on` rule denies; otherwise allowed. Headers
 * are built for the results Redis decided (a fail-open rule that Redis could not decide has no RateLimit
 * member, even when the local fallback limiter judged it).
 */
import { traitsOf } from "../engine/algorithms";
import { capacityOf, type Decision, type RuleResult } from "../engine/types";
import { delayOf } from "./delay";
import { type CostAboveCapacity, LoadShedError, QuotaExceededError, ReducedCapacityError } from "./errors";
import { ceilSeconds, rateLimitHeaders, retryAfterSeconds, strictest } from "./headers";

/** What the request gets: the headers to add to an allowed response, or the problem to answer with. */
export type Verdict =
  | { allowed: true; headers: Record<string, string> }
  | { allowed: false; problem: QuotaExceededError | ReducedCapacityError | LoadShedError };

/**
 * Whether a result has a RateLimit member (and may be the one the X-RateLimit-* headers and
 * `c.get("rateLimit")` describe): only what Redis decided (now, ahead of time: a lease, or recently: the deny
 * cache). An undecided rule has no figures; the approximate fallback limiter's guesses are not advertised as
 * quota (docs/failure-modes.md); a rule whose algorithm has no member (shed: the origin's budget, not the
 * client's quota) has none. A lease's figures are Redis's at the grant minus what this isolate spent since
 * (docs/leases.md).
 */
export const advertised = (r: RuleResult): boolean =>
  r.source !== "undecided" &&
  r.source !== "fallback" &&
  traitsOf(r.call.algorithm).rateLimitMember !== "none";

/** Whether a decided result denies the request: an `on` rule over its limit (`monitor` only watches). */
const denies = (r: RuleResult): boolean => r.call.mode === "on" && r.outcome !== "allowed";

/** Judges one decision (this runs on every request: the common case makes no copies). */
export function verdictOf(decision: Decision): Verdict {
  const { results } = decision;
  // Most requests: every rule decided, advertised and allowing: the headers are of all of them, no copies.
  if (results.every((r) => advertised(r) && !denies(r))) {
    return { allowed: true, headers: rateLimitHeaders(results) };
  }
  // Undecided rules have no member either; the ones that fail closed answer 503.
  const members: RuleResult[] = [];
  const closed: RuleResult[] = [];
  const denied: RuleResult[] = [];
  for (const r of results) {
    if (r.source === "undecided") {
      if (r.call.mode === "on" && r.call.failure === "closed") closed.push(r);
      continue;
    }
    if (advertised(r)) members.push(r);
    if (denies(r)) denied.push(r);
  }
  if (closed.length > 0) {
    const retryAfter = Math.max(1, ...closed.map((r) => ceilSeconds(r.retryAfterMs)));
    const reason = closed[0]?.reason ?? "redis_error";
    return {
      allowed: false,
      problem: new ReducedCapacityError(
        closed.map((r) => r.call.rule),
        retryAfter,
        reason,
      ),
    };
  }

  const headers = rateLimitHeaders(members);
  if (denied.length === 0) return { allowed: true, headers };
  // Over its own quota, a client hears 429 (its to fix); shed alone, 503 (the origin's load, not its fault).
  const violated = denied.filter((r) => traitsOf(r.call.algorithm).denial === "quota");
  if (violated.length === 0) {
    const shedBy = denied[0] as RuleResult;
    return {
      allowed: false,
      problem: new LoadShedError(
        denied.map((r) => r.call.rule),
        shedBy.call.priorityClass,
        1, // slots free as requests finish: no clock predicts when
      ),
    };
  }

  const retryAfter = retryAfterSeconds(violated);
  const policy = (strictest(violated) as RuleResult).call.rule;
  return {
    allowed: false,
    problem: new QuotaExceededError(
      violated.map((r) => r.call.rule),
      policy,
      retryAfter,
      headers,
      violated.filter((r) => r.outcome === "cost-exceeds-capacity").map(aboveCapacity),
    ),
  };
}

/**
 * The cost and capacity of a rule that denied a cost above its capacity: the call's own limits (tier applied),
 * or under an override the limit in force (a window's capacity); an override's burst is not in the reply.
 */
function aboveCapacity(r: RuleResult): CostAboveCapacity {
  const capacity = !r.overridden
    ? capacityOf(r.call)
    : traitsOf(r.call.algorithm).takesBurst
      ? undefined
      : r.limit;
  return { rule: r.call.rule, cost: r.call.cost, capacity };
}

/**
 * `Server-Timing: ratelimit;dur=<ms>`, with the reason when any result did not come the normal way (not from
 * Redis, or from Redis for a call that was not the rule's own: a degraded answer is visible), or
 * `desc="delayed"` and a `delay;dur=<ms>` metric when a rule held the request.
 */
export function serverTiming(decision: Decision): string {
  const degraded = decision.results.find((r) => r.source !== "redis" || r.reason !== undefined);
  const dur = Math.max(0, Math.round(decision.durationMs * 10) / 10);
  const waitMs = delayOf(decision);
  const reason = degraded ? (degraded.reason ?? degraded.source) : waitMs > 0 ? "delayed" : undefined;
  const timing = reason ? `ratelimit;dur=${dur};desc="${reason}"` : `ratelimit;dur=${dur}`;
  return waitMs > 0 ? `${timing}, delay;dur=${waitMs}` : timing;
}
