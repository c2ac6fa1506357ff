/**
 * What one rule did to one request, in the words charts and logs use: `allowed`, `denied` (this rule
 * blocked it), `would-deny` (a `monitor` rule that would have blocked it), `unavailable` (Redis could not
 * decide and the rule fails closed), or `skipped` (not evaluated: another rule's cached denial answered first).
 */
import type { RuleResult } from "../engine/types";

/** One rule's verdict on one request (the request's own is `Verdict` in src/middleware/verdict.ts). */
export type RuleVerdict = "allowed" | "denied" | "would-deny" | "unavailable" | "skipped";

/** The verdict of one rule's result. */
export function ruleVerdictOf(result: RuleResult): RuleVerdict {
  if (result.source === "undecided") {
    if (result.reason === "deny_cache") return "skipped";
    return result.call.mode === "on" && result.call.failure === "closed" ? "unavailable" : "allowed";
  }
  if (result.outcome === "allowed") return "allowed";
  return result.call.mode === "on" ? "denied" : "would-deny";
}
