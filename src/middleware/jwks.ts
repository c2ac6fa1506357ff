/**
 * A request whose bearer token could not be checked because the JWKS is unreachable (docs/failure-modes.md,
 * "JWKS"): the planner marks the calls of the rules that read it `reason: "jwks_unavailable"`
 * (src/middleware/plan.ts). If one of them enforces and fails closed, the request is not sent to Redis at all:
 * its decision is made here, those rules undecided, and goes through the same verdict (503), `Server-Timing`
 * and log line as one Redis could not decide.
 */
import { decisionOf, ruleResult } from "../engine/results";
import { type Decision, failsClosed, type RuleCall } from "../engine/types";

/**
 * The 503 decision when a rule that fails closed could not be keyed, or `undefined` when every call may go to
 * Redis.
 * @param retryAfterMs until the JWKS is asked again
 */
export function uncheckedDecision(calls: readonly RuleCall[], retryAfterMs: number): Decision | undefined {
  const refused = calls.filter((call) => call.reason === "jwks_unavailable" && failsClosed(call));
  if (refused.length === 0) return undefined;
  const results = refused.map((call) =>
    ruleResult({
      call,
      // Not "allowed", as a rule Redis could not decide is: no slot was taken, so there is none to release.
      outcome: "denied",
      limit: call.limit,
      remaining: 0,
      resetAfterMs: 0,
      retryAfterMs: Math.max(1000, retryAfterMs),
      source: "undecided",
    }),
  );
  return decisionOf(false, results, 0);
}
