/**
 * What the limiter tells beside its response about a decided request: the handler's `c.get("rateLimit")`
 * (`infoOf`), the app's `onDecision` observer (`report`) and its `onAction` observer (`actionReport`).
 */
import type { Decision, RuleResult } from "../engine/types";
import type { RequestFacts } from "../identity";
import { strictest } from "./headers";
import type { DecisionEvent, RateLimitInfo } from "./options";
import { advertised } from "./verdict";

/** What `c.get("rateLimit")` shows a handler: the strictest of the rules the headers advertise. */
export function infoOf(decision: Decision): RateLimitInfo {
  const { results } = decision;
  // One advertised rule (the common case) needs no filtered copy.
  const members =
    results.length === 1 && advertised(results[0] as RuleResult) ? results : results.filter(advertised);
  const top = strictest(members);
  return {
    allowed: decision.allowed,
    rules: decision.results,
    policy: top?.call.rule,
    limit: top?.limit,
    remaining: top?.remaining,
    // No advertised rule (only shed rules, or the fallback limiter's guesses): where the decision came from.
    source: (top ?? results.find((r) => r.source !== "undecided"))?.source ?? "undecided",
  };
}

/**
 * Tells `onDecision` of a decided request (`LimiterDeps.onDecision` in src/middleware/limiter-deps.ts): never
 * awaited, and nothing it throws or rejects with reaches the request.
 */
export function report(
  onDecision: ((event: DecisionEvent) => unknown) | undefined,
  decision: Decision,
  raw: Request,
  request: RequestFacts,
): void {
  if (!onDecision) return;
  try {
    const returned = onDecision(new Reported(decision, raw, request));
    // An async observer's rejection, left alone, is an unhandled rejection: a Node server exits on it.
    // A synchronous observer's return value (often `undefined`, or whatever a push returned) costs nothing.
    if (returned instanceof Promise) returned.catch(ignore);
  } catch {
    // An observer must never fail the request.
  }
}

function ignore(): void {}

/** An action's verdict: a `deny` rule refused the request (its 403), or would have in `monitor` mode. */
export type ActionVerdict = "denied" | "would-deny";

/**
 * The app's `onAction` as the limiter calls it (`LimiterDeps.onAction`): synchronously, and nothing it throws or
 * rejects with reaches the request. `undefined`: none.
 */
export function actionReport(
  onAction: ((rule: string, verdict: ActionVerdict) => unknown) | undefined,
): ((rule: string, verdict: ActionVerdict) => void) | undefined {
  if (!onAction) return undefined;
  return (rule, verdict) => {
    try {
      const returned = onAction(rule, verdict);
      if (returned instanceof Promise) returned.catch(ignore);
    } catch {
      // An observer must never fail the request.
    }
  };
}

/** A decided request as an observer sees it; its id is made only if the observer reads it. */
class Reported implements DecisionEvent {
  constructor(
    readonly decision: Decision,
    readonly request: Request,
    private readonly facts: RequestFacts,
  ) {}

  get requestId(): string {
    return this.facts.id();
  }
}
