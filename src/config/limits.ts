/**
 * The limits one request gets under a rule: the rule's own, or its tier's (README: "Rules"). The one part of a
 * rule's config read per request, by the limiter's plan and the admin API alike.
 */
import type { CalendarBounds } from "../util/calendar";
import type { RuleConfig } from "./rule-config";

/** The limits one request gets under a rule. */
export interface EffectiveLimits {
  /** The tier these come from; `undefined` = the rule's own (no tier, or one the rule does not name). */
  tier: string | undefined;
  limit: number;
  /** A calendar period's: the current one's length, by the edge's clock. */
  periodMs: number;
  burst: number;
  /** A calendar period's bounds around now, by the edge's clock (the script picks by Redis's). */
  calendar?: CalendarBounds | undefined;
}

/**
 * The one tier resolver, shared by the limiter and the admin API: a named tier's own `limit` / `period` /
 * `burst` where it sets them (its `burst` defaulting to its `limit`), the rule's elsewhere; an unknown or
 * absent tier gets the rule's own.
 */
export function limitsFor(rule: RuleConfig, tierName: string | undefined): EffectiveLimits {
  const own = ownLimitsFor(rule, tierName);
  if (rule.calendar === undefined) return own;
  // A calendar rule's tiers keep its period (src/config/calendar.ts): this period's bounds, worked out once per
  // period per isolate.
  const calendar = rule.calendar.around(Date.now());
  return { ...own, periodMs: calendar.endMs - calendar.startMs, calendar };
}

function ownLimitsFor(rule: RuleConfig, tierName: string | undefined): EffectiveLimits {
  const tier =
    tierName !== undefined && Object.hasOwn(rule.tiers, tierName) ? rule.tiers[tierName] : undefined;
  if (tier === undefined) {
    return { tier: undefined, limit: rule.limit, periodMs: rule.periodMs, burst: rule.burst };
  }
  return {
    tier: tierName,
    limit: tier.limit ?? rule.limit,
    periodMs: tier.periodMs ?? rule.periodMs,
    burst: tier.burst ?? tier.limit ?? rule.burst,
  };
}
