/**
 * Applies the failure policy and the modes to a `Decision` (README: "Rules", "Responses", "When things fail"): 503 if a matched `on`
 * rule that fails closed could not be decided; 429 if an `on` rule denies; otherwise allowed. Headers
 * are built for the results Redis decided (a fail-open rule that Redis could not decide has no RateLimit
 * member, even when the local fallback limiter judged it).
 */
import type { Decision, RuleResult } from "../engine/types";
import { QuotaExceededError, ReducedCapacityError } from "./errors";
import { ceilSeconds, rateLimitHeaders, retryAfterSeconds, strictest } from "./headers";

/** What the request gets: the headers to add to an allowed response, or the problem to answer with. */
export type Verdict =
  | { allowed: true; headers: Record<string, string> }
  | { allowed: false; problem: QuotaExceededError | ReducedCapacityError };

/** Judges one decision. */
export function verdictOf(decision: Decision): Verdict {
  const closed = decision.results.filter(
    (r) => r.source === "undecided" && r.call.mode === "on" && r.call.failure === "closed",
  );
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

  // RateLimit members only for what Redis decided (now, or recently: the deny cache). Undecided rules and
  // the approximate fallback limiter's guesses are not advertised as quota (README: "When things fail").
  // A lease's figures are Redis's at the grant minus what this isolate spent since (README "Leases").
  const fromRedis = decision.results.filter(
    (r) => r.source === "redis" || r.source === "deny-cache" || r.source === "lease",
  );
  const headers = rateLimitHeaders(fromRedis);
  const decided = decision.results.filter((r) => r.source !== "undecided");
  const violated = decided.filter((r) => r.call.mode === "on" && r.outcome !== "allowed");
  if (violated.length === 0) return { allowed: true, headers };

  const retryAfter = retryAfterSeconds(violated);
  const policy = (strictest(violated) as RuleResult).call.rule;
  return {
    allowed: false,
    problem: new QuotaExceededError(
      violated.map((r) => r.call.rule),
      policy,
      retryAfter,
      headers,
    ),
  };
}

/** `Server-Timing: ratelimit;dur=<ms>`, with the reason when any result did not come from Redis (STYLE §9). */
export function serverTiming(decision: Decision | undefined): string {
  if (decision === undefined) return "ratelimit;dur=0";
  const degraded = decision.results.find((r) => r.source !== "redis");
  const dur = Math.max(0, Math.round(decision.durationMs * 10) / 10);
  const reason = degraded ? (degraded.reason ?? degraded.source) : undefined;
  return reason ? `ratelimit;dur=${dur};desc="${reason}"` : `ratelimit;dur=${dur}`;
}
