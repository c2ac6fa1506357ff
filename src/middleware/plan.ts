/**
 * From a request to the engine's input: the matched rules in their effective mode, each resolved into a
 * `RuleCall` (identity hashed, tier applied, cost read). `off` rules and `missing = "skip"` rules produce
 * no call; `missing = "deny"` and an invalid cost end the request here (401 / 400). A rule whose `jwt:` parts
 * cannot be checked because the JWKS is unreachable gets a call marked `reason: "jwks_unavailable"`: keyed by
 * the client IP, or, for a rule that fails closed, one that the limiter answers 503 without sending
 * (src/middleware/jwks.ts).
 */
import type { Context } from "hono";
import { limitsFor } from "../config/limits";
import type { RuleConfig } from "../config/rule-config";
import { traitsOf } from "../engine/algorithms";
import { hashIdentity, recentHash } from "../engine/keys";
import type { FailurePolicy, Mode, RuleCall } from "../engine/types";
import {
  identityOf,
  needsVerification,
  plainIdentityOf,
  plainTierOf,
  type RequestFacts,
  tierOf,
} from "../identity";
import { effectiveMode, type LiveModes } from "../rules/modes";
import { costOf, headerCost } from "./cost";
import { MissingIdentityError } from "./errors";
import type { CostFunction, KeyFunction } from "./options";
import { shardIdentity, shedPlan } from "./shed";

/** A validated rule plus the functions the middleware user gave for it. */
export interface PlannedRule {
  rule: RuleConfig;
  keyFn?: KeyFunction | undefined;
  tierFn?: KeyFunction | undefined;
  costFn?: CostFunction | undefined;
}

/** Everything per instance the planner needs. */
export interface PlanContext {
  mode: Mode;
  failure: FailurePolicy;
  live: LiveModes;
  /** Without an override index in `live`: whether every call reads its identity's override. */
  overrides: boolean;
  /** Masks an identity into the hint each call carries (`RATE_LIMIT_DASHBOARD_HINTS`); absent = no hint. */
  hint?: ((identity: string) => string) | undefined;
}

/**
 * The engine calls for one request, in rule order. At once (no promise) when every rule's inputs are in the
 * request already, as for `ip`, `header:` or `query:` keys of identities this isolate has hashed before;
 * a promise when a key function, a JWT or a new identity's digest must be waited for.
 */
export function planCalls(
  c: Context,
  request: RequestFacts,
  rules: readonly PlannedRule[],
  context: PlanContext,
): RuleCall[] | Promise<RuleCall[]> {
  const planned: (RuleCall | undefined | Promise<RuleCall | undefined>)[] = [];
  let waiting = false;
  try {
    for (const rule of rules) {
      const call = planCall(c, request, rule, context);
      if (call instanceof Promise) waiting = true;
      planned.push(call);
    }
  } catch (error) {
    // A later rule's 401/400 ends the request: an earlier rule's pending work must not reject unhandled.
    for (const call of planned) if (call instanceof Promise) call.catch(() => undefined);
    throw error;
  }
  if (waiting) return Promise.all(planned).then(defined);
  // Most requests: every rule planned at once, none skipped (no copy needed).
  return planned.includes(undefined) ? defined(planned as (RuleCall | undefined)[]) : (planned as RuleCall[]);
}

const defined = (calls: (RuleCall | undefined)[]): RuleCall[] =>
  calls.filter((call): call is RuleCall => call !== undefined);

function planCall(
  c: Context,
  request: RequestFacts,
  planned: PlannedRule,
  context: PlanContext,
): RuleCall | undefined | Promise<RuleCall | undefined> {
  const { rule } = planned;
  const mode = effectiveMode(rule, context.live, context.mode);
  if (mode === "off") return undefined; // off: no headers, no Redis call
  if (
    planned.keyFn ||
    planned.tierFn ||
    planned.costFn ||
    rule.shed ||
    needsVerification(rule.key) ||
    needsVerification(rule.tier)
  ) {
    return planCallWaiting(c, request, planned, context, mode);
  }

  const resolved = plainIdentityOf(rule, request);
  if (resolved.kind === "skip") return undefined;
  if (resolved.kind === "deny") throw new MissingIdentityError(rule.name, rule.keyText);
  const tierName = plainTierOf(rule, request);
  const cost = traitsOf(rule.algorithm).takesCost ? headerCost(c, rule) : 1;
  const hash = recentHash(resolved.identity);
  if (hash !== undefined)
    return hinted(callOf(rule, tierName, hash, cost, mode, context), resolved.identity, context);
  return hashIdentity(resolved.identity).then((h) =>
    hinted(callOf(rule, tierName, h, cost, mode, context), resolved.identity, context),
  );
}

/** A rule with a key, tier or cost function, or a `jwt:` part: its inputs are awaited. */
async function planCallWaiting(
  c: Context,
  request: RequestFacts,
  { rule, keyFn, tierFn, costFn }: PlannedRule,
  context: PlanContext,
  mode: RuleCall["mode"],
): Promise<RuleCall | undefined> {
  let unchecked = false; // whether the rule's `jwt:` parts could not be checked: the JWKS is unreachable
  if (readsJwt(rule)) {
    await request.jwtPayload();
    unchecked = request.jwksUnavailable !== undefined;
  }
  // Not the client's fault (docs/failure-modes.md): a rule that fails closed answers 503, as when Redis
  // cannot decide, and nothing else of it runs (its call, keyed by the client IP, names it in the log line);
  // any other goes on as for a request without a token, but never denies it (401).
  if (unchecked && mode === "on" && (rule.failure ?? context.failure) === "closed") {
    return uncheckedCall(callOf(rule, undefined, await hashIdentity(request.clientIp()), 1, mode, context));
  }
  let identity: string | undefined;
  if (keyFn) {
    identity = nonEmpty(await keyFn(c));
    if (identity === undefined && rule.missing === "ip") identity = request.clientIp();
  } else {
    const resolved = await identityOf(rule, request);
    identity = resolved.kind === "identity" ? resolved.identity : undefined;
  }
  if (identity === undefined) {
    if (rule.missing === "skip") return undefined;
    if (unchecked && needsVerification(rule.key)) identity = request.clientIp();
    else throw new MissingIdentityError(rule.name, keyFn ? undefined : rule.keyText);
  }

  const tierName = tierFn ? nonEmpty(await tierFn(c)) : await tierOf(rule, request);
  let share: ShedShare | undefined;
  if (rule.shed) {
    // One sub-key of the budget, and the share of it this request's priority class may fill.
    const plan = await shedPlan(
      { ...rule, shed: rule.shed },
      c.req.method,
      request,
      limitsFor(rule, tierName).limit,
    );
    share = { limit: plan.limit, priorityClass: plan.priorityClass };
    identity = shardIdentity(identity, plan.shard);
  }
  const identityHash = await hashIdentity(identity);
  // A rule that takes no cost (a concurrency or shed rule: one slot per request) counts one, whatever it is.
  const cost = traitsOf(rule.algorithm).takesCost ? await costOf(c, rule, costFn) : 1;
  const call = hinted(callOf(rule, tierName, identityHash, cost, mode, context, share), identity, context);
  return unchecked ? uncheckedCall(call) : call;
}

/** `call` with its identity's masked hint when hints are on (computed here: the raw value goes no further). */
function hinted(call: RuleCall, identity: string, context: PlanContext): RuleCall {
  if (context.hint) call.hint = context.hint(identity);
  return call;
}

/** A call whose rule's `jwt:` parts could not be checked: its results say so (`Server-Timing`, log line). */
function uncheckedCall(call: RuleCall): RuleCall {
  call.reason = "jwks_unavailable";
  return call;
}

/** Whether a rule reads the bearer token: a `jwt:` part in its key, tier or shed priority. */
const readsJwt = (rule: RuleConfig): boolean =>
  needsVerification(rule.key) ||
  needsVerification(rule.tier) ||
  (rule.shed !== undefined && rule.shed.priority !== "method" && needsVerification(rule.shed.priority));

/** A shed rule's limit for this request: its priority class's share of one sub-key (src/middleware/shed.ts). */
interface ShedShare {
  limit: number;
  priorityClass: string;
}

function callOf(
  rule: RuleConfig,
  tierName: string | undefined,
  identityHash: string,
  cost: number,
  mode: RuleCall["mode"],
  context: PlanContext,
  share?: ShedShare,
): RuleCall {
  const { limit, periodMs, burst, calendar } = limitsFor(rule, tierName);
  const call: RuleCall = {
    rule: rule.name,
    algorithm: rule.algorithm,
    limit: share?.limit ?? limit,
    periodMs,
    burst: share?.limit ?? burst,
    delayMs: rule.delayMs,
    cost,
    mode,
    failure: rule.failure ?? context.failure,
    identityHash,
    // Only an identity the isolate knows to have an override costs the script an override read (never where
    // none applies: a shed sub-key's limit is the class's share).
    override:
      traitsOf(rule.algorithm).readsOverride &&
      (context.live.overrides?.has(rule.name, identityHash) ?? context.overrides),
    lease: rule.lease,
    blockMs: rule.blockMs,
  };
  if (calendar !== undefined) call.calendar = calendar;
  if (rule.count !== undefined) call.givesBackAfterResponse = true;
  if (share !== undefined) call.priorityClass = share.priorityClass;
  if (rule.sync === "async") call.sync = "async";
  return call;
}

const nonEmpty = (value: string | undefined): string | undefined =>
  value === undefined || value === "" ? undefined : value;
