/**
 * Validates rules (from `RATE_LIMIT_RULES` or `rateLimit({ rules })`) and resolves their defaults once,
 * into the `RuleConfig` every later stage reads (./rule-config.ts): each rule as written is an action rule
 * (./action-rule.ts) or a counting rule (./counting-rule.ts), and the set is checked as a whole here (names
 * used twice, reserved names). Nothing here runs per request.
 */
import * as v from "valibot";
import { actionRule, isActionRule } from "./action-rule";
import { ruleConfig } from "./counting-rule";
import { ConfigError, collecting, configErrorFrom } from "./errors";
import type { ActionRule, ParseRulesOptions, RuleConfig, RuleSet } from "./rule-config";
import { ruleSchema } from "./schema";

/**
 * Validates rules and applies defaults; throws a `ConfigError` naming what is wrong in every rule at once:
 * each rule's field errors, a name used twice, and, for a rule whose fields are each valid, what its fields
 * say against each other (a `delay` on a window rule, a `jwt:` key with no verifier).
 */
export function parseRules(input: unknown, options: ParseRulesOptions): RuleConfig[] {
  return parseRuleSet(input, options).rules;
}

/**
 * {@link parseRules}, keeping the action rules (docs/lists.md) too: every rule as written, split into the
 * counting rules and the action rules, each action rule knowing its place among the counting ones.
 */
export function parseRuleSet(input: unknown, { label, jwtVerifiable }: ParseRulesOptions): RuleSet {
  if (!Array.isArray(input)) {
    throw new ConfigError(`${label}: expected an array of rules (a TOML array of tables, or a JSON array)`);
  }
  if (input.length === 0) throw new ConfigError(`${label}: no rules, add at least one`);
  const problems: string[] = [];
  const seen = new Map<string, number>();
  const actions: ActionRule[] = [];
  let counted = 0;
  const rules = input.map((raw, index) => {
    const at = `${label}[${index}]`;
    if (isActionRule(raw)) {
      const name = raw.name;
      const first = typeof name === "string" ? seen.get(name) : undefined;
      if (first !== undefined) problems.push(`${at}.name: "${name}" is already used by ${label}[${first}]`);
      else if (typeof name === "string") seen.set(name, index);
      const action = collecting(problems, () => actionRule(raw, at, label, jwtVerifiable, counted));
      if (action) actions.push(action);
      return undefined;
    }
    counted++;
    const result = v.safeParse(ruleSchema, raw);
    if (!result.success) problems.push(...configErrorFrom(at, result.issues).problems);
    problems.push(...reservedNames(raw, at));
    const name = (raw as { name?: unknown } | null)?.name;
    const first = typeof name === "string" ? seen.get(name) : undefined;
    if (first !== undefined) problems.push(`${at}.name: "${name}" is already used by ${label}[${first}]`);
    else if (typeof name === "string") seen.set(name, index);
    if (!result.success) return undefined;
    const rule = result.output;
    return collecting(problems, () => ruleConfig(rule, at, label, jwtVerifiable));
  });
  if (problems.length > 0) throw new ConfigError(problems);
  return { rules: rules.filter((rule): rule is RuleConfig => rule !== undefined), actions };
}

/**
 * Names every object already has (`constructor`, `__proto__`, `toString`, …, and `prototype`): the schema
 * drops some of them without a word, and a lookup by such a name would read the object's own member, so a
 * tier or priority class named so would never apply. Refused, naming the field. A JavaScript object literal's
 * `__proto__: {…}` sets the prototype instead of a key, and is refused the same.
 */
const RESERVED_NAMES: ReadonlySet<string> = new Set([
  ...Object.getOwnPropertyNames(Object.prototype),
  "prototype",
]);

function reservedNames(raw: unknown, at: string): string[] {
  const problems: string[] = [];
  for (const [field, what] of [
    ["tiers", "a tier"],
    ["priorities", "a priority class"],
  ] as const) {
    const names = (raw as Record<string, unknown> | null)?.[field];
    if (!names || typeof names !== "object") continue;
    const prototype = Object.getPrototypeOf(names);
    const found = Object.keys(names).filter((name) => RESERVED_NAMES.has(name));
    if (prototype !== Object.prototype && prototype !== null && !Array.isArray(names))
      found.push("__proto__");
    for (const name of new Set(found)) {
      problems.push(
        `${at}.${field}.${name}: "${name}" cannot name ${what} (every object has a member of that name): choose another`,
      );
    }
  }
  return problems;
}
