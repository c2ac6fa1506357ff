/**
 * A request's one decision under a given copy of the live modes: its counting rules (matched, or walked here
 * among the action rules), planned into calls, decided in ONE engine call. A deny rule's 403, or nothing when
 * no rule applies. Without a promise when nothing needs one (a hot identity's leases answer at once).
 */
import type { Context } from "hono";
import { traitsOf } from "../engine/algorithms";
import type { Decision, RuleCall, WaitUntil } from "../engine/types";
import type { RequestFacts } from "../identity";
import type { LiveModes } from "../rules/modes";
import { ProblemError } from "../util/problem";
import { walkRules } from "./actions";
import { uncheckedDecision } from "./jwks";
import type { Prepared } from "./limiter-deps";
import { type PlannedRule, planCalls } from "./plan";

/** The request id of a decision no algorithm needs one for: the script stores it only where the algorithm says so. */
export const NO_REQUEST_ID = "-";

/** A request's decision, with the id the script saw and when it was made. */
export interface Decided {
  decision: Decision;
  requestId: string;
  decidedAtMs: number;
}

/** What the rules say of a request: a decision, a deny rule's 403, or nothing (no rule applies). */
export type Outcome = Decided | ProblemError | undefined;

/** Whether every rule was decided in the isolate by design (async rules): no Redis round trip to wait beside. */
export const madeHere = (decision: Decision): boolean => decision.results.every((r) => r.source === "async");

/**
 * The request's one decision under `live`: `matched` are its counting rules (absent: walked here, among the
 * action rules). A deny rule's 403, or nothing when no rule applies (each off or skipped). Without a promise
 * when nothing needs one (a hot identity's leases answer at once).
 */
export function decideUnder(
  p: Prepared,
  c: Context,
  request: RequestFacts,
  live: LiveModes,
  matched: PlannedRule[] | undefined,
  budgetMs: number,
  waitUntil: WaitUntil,
): Outcome | Promise<Outcome> {
  if (matched !== undefined) return decideMatched(p, c, request, live, matched, budgetMs, waitUntil);
  const { lists } = p.deps;
  lists?.sync(live, waitUntil);
  const walked = walkRules(p.steps ?? [], c.req.method, request, {
    live,
    mode: p.deps.mode,
    lists,
    onAction: p.deps.onAction,
  });
  const go = (outcome: PlannedRule[] | ProblemError) =>
    outcome instanceof ProblemError
      ? outcome
      : decideMatched(p, c, request, live, outcome, budgetMs, waitUntil);
  return walked instanceof Promise ? walked.then(go) : go(walked);
}

function decideMatched(
  p: Prepared,
  c: Context,
  request: RequestFacts,
  live: LiveModes,
  matched: PlannedRule[],
  budgetMs: number,
  waitUntil: WaitUntil,
): Outcome | Promise<Outcome> {
  if (matched.length === 0) return undefined;
  const { mode, failure, overrides, identityHint: hint } = p.deps;
  // A missing identity under `missing = "deny"` or a bad cost throws its 401 / 400 here.
  const plan = planCalls(c, request, matched, { mode, failure, live, overrides, hint });
  const go = (calls: RuleCall[]) => decideCalls(p, c, request, calls, budgetMs, waitUntil);
  return plan instanceof Promise ? plan.then(go) : go(plan);
}

function decideCalls(
  p: Prepared,
  c: Context,
  request: RequestFacts,
  calls: RuleCall[],
  budgetMs: number,
  waitUntil: WaitUntil,
): Outcome | Promise<Outcome> {
  if (calls.length === 0) return undefined; // no headers, no Redis call
  const { decider } = p.deps;
  const { stamped } = p;
  // A bucket's give-back enters the request in its refund ledger: a real id there too.
  const requestId = calls.some((call) => traitsOf(call.algorithm).storesRequestId || stamped.has(call.rule))
    ? request.id()
    : NO_REQUEST_ID;
  // A rule that fails closed and could not be keyed (the JWKS is unreachable) answers 503 without Redis; a
  // hot identity's decision comes from its leases at once: no Redis call, no promise.
  const unchecked = request.jwksUnavailable;
  const decidedAtMs = Date.now();
  const now =
    (unchecked && uncheckedDecision(calls, unchecked.retryAfterMs)) ||
    decider.decideNow?.(calls, requestId, waitUntil);
  if (now) return { decision: now, requestId, decidedAtMs };
  return decider
    .decide(calls, requestId, {
      budgetMs,
      waitUntil,
      region: p.deps.regionOf?.(c.req.raw),
      onTimer: (timer) => c.set("floodgateTimer", timer),
      ...(stamped.size > 0 && calls.some((call) => stamped.has(call.rule)) && { stamps: true }),
    })
    .then((decision) => ({ decision, requestId, decidedAtMs }));
}
