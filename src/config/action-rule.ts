/**
 * An action rule (`action = "deny" | "allow"`, docs/lists.md), checked: it counts nothing, so every counting
 * field on it is refused by name.
 */
import * as v from "valibot";
import { ConfigError, configErrorFrom } from "./errors";
import type { ActionRule } from "./rule-config";
import { actionRuleSchema, ruleSchema } from "./schema";
import { parseKey } from "./sources";

/** Whether a rule as written is an action rule: it names an `action` (it may wrongly name an `algorithm` too). */
export const isActionRule = (raw: unknown): raw is Record<string, unknown> =>
  typeof raw === "object" && raw !== null && "action" in raw;

/** The fields only counting rules have (every field of the rule syntax an action rule does not know). */
const COUNTING_FIELDS = Object.keys(ruleSchema.entries).filter(
  (field) => !(field in actionRuleSchema.entries),
);

/** One action rule, checked. */
export function actionRule(
  raw: Record<string, unknown>,
  at: string,
  label: string,
  jwtVerifiable: boolean,
  before: number,
): ActionRule {
  const counting = COUNTING_FIELDS.filter((field) => raw[field] !== undefined);
  if (counting.length > 0) {
    throw new ConfigError(
      counting.map((field) =>
        field === "algorithm"
          ? `${at}.action: a rule has an action or an algorithm, not both (an action rule counts nothing)`
          : `${at}.${field}: an action rule counts nothing, so it has no ${field} (only rules with an algorithm do)`,
      ),
    );
  }
  const result = v.safeParse(actionRuleSchema, raw);
  if (!result.success) throw configErrorFrom(at, result.issues);
  const rule = result.output;
  const keyText = rule.key === undefined ? "ip" : Array.isArray(rule.key) ? rule.key.join("|") : rule.key;
  const key = parseKey(rule.key ?? "ip");
  const jwt = key.find((part) => part.kind === "jwt");
  if (jwt && !jwtVerifiable) {
    throw new ConfigError(
      `${at}.key: "jwt:${jwt.claim}" needs ${label === "RATE_LIMIT_RULES" ? "RATE_LIMIT_JWT_SECRET or RATE_LIMIT_JWKS_URL" : "jwt.secret or jwt.jwksUrl"} (unverified claims are forgeable)`,
    );
  }
  return {
    name: rule.name,
    action: rule.action,
    match: rule.match ?? {},
    key,
    keyText,
    mode: rule.mode,
    before,
  };
}
