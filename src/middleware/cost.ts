/**
 * What one request costs under a rule (README: "Rules"): its fixed units, its cost header, or the middleware
 * user's cost function, each checked to be a whole number of units from 1 to `MAX_UNITS` (else a 400).
 */
import type { Context } from "hono";
import { MAX_UNITS } from "../config/fields";
import type { RuleConfig } from "../config/rule-config";
import { InvalidCostError } from "./errors";
import type { CostFunction } from "./options";

/** The cost of one request: its cost function's answer, checked, else the rule's fixed or header cost. */
export async function costOf(
  c: Context,
  rule: RuleConfig,
  costFn: CostFunction | undefined,
): Promise<number> {
  if (costFn) return checkedCost(rule.name, "the cost function", await costFn(c));
  return headerCost(c, rule);
}

/** The rule's fixed cost, or the one its cost header gives. */
export function headerCost(c: Context, rule: RuleConfig): number {
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
