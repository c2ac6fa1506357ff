/**
 * From a request to the engine's input: the matched rules in their effective mode, each resolved into a
 * `RuleCall` (identity hashed, tier applied, cost read). `off` rules and `missing = "skip"` rules produce
 * no call; `missing = "deny"` and an invalid cost end the request here (401 / 400).
 */
import type { Context } from "hono";
import { limitsFor, MAX_UNITS, type RuleConfig } from "../config";
import { hashIdentity } from "../engine/keys";
import type { FailurePolicy, Mode, RuleCall } from "../engine/types";
import { identityOf, type RequestIdentity, tierOf } from "../identity";
import { effectiveMode, type LiveModes } from "../rules/modes";
import { InvalidCostError, MissingIdentityError } from "./errors";
import type { CostFunction, KeyFunction } from "./options";

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
}

/** The engine calls for one request, in rule order. */
export async function planCalls(
  c: Context,
  request: RequestIdentity,
  rules: readonly PlannedRule[],
  context: PlanContext,
): Promise<RuleCall[]> {
  const calls = await Promise.all(rules.map((planned) => planCall(c, request, planned, context)));
  return calls.filter((call): call is RuleCall => call !== undefined);
}

async function planCall(
  c: Context,
  request: RequestIdentity,
  { rule, keyFn, tierFn, costFn }: PlannedRule,
  context: PlanContext,
): Promise<RuleCall | undefined> {
  const mode = effectiveMode(rule, context.live, context.mode);
  if (mode === "off") return undefined; // off: no headers, no Redis call

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
    throw new MissingIdentityError(rule.name, keyFn ? "a key" : rule.keyText);
  }

  const tierName = tierFn ? nonEmpty(await tierFn(c)) : await tierOf(rule, request);
  const { limit, periodMs, burst } = limitsFor(rule, tierName);
  const identityHash = await hashIdentity(identity);

  return {
    rule: rule.name,
    algorithm: rule.algorithm,
    limit,
    periodMs,
    burst,
    // A concurrency rule holds one slot per request, whatever the cost.
    cost: rule.algorithm === "concurrency" ? 1 : await costOf(c, rule, costFn),
    mode,
    failure: rule.failure ?? context.failure,
    identityHash,
    // Only an identity the isolate knows to have an override costs the script an override read.
    override: context.live.overrides?.has(rule.name, identityHash) ?? true,
    lease: rule.lease,
  };
}

async function costOf(c: Context, rule: RuleConfig, costFn: CostFunction | undefined): Promise<number> {
  if (costFn) return checkedCost(rule.name, "the cost function", await costFn(c));
  if (rule.cost.kind === "units") return rule.cost.units;
  const header = c.req.header(rule.cost.name);
  // An absent header means one unit (README: "Rules"), so plain requests stay cheap.
  if (header === undefined) return 1;
  const text = header.trim();
  return checkedCost(rule.name, `header ${rule.cost.name}`, /^\d{1,10}$/.test(text) ? Number(text) : text);
}

function checkedCost(rule: string, source: string, value: unknown): number {
  if (typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= MAX_UNITS) return value;
  throw new InvalidCostError(rule, source, value);
}

const nonEmpty = (value: string | undefined): string | undefined =>
  value === undefined || value === "" ? undefined : value;
