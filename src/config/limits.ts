/**
 * The limits one request gets under a rule: the rule's own, or its tier's (README: "Rules"). The one part of a
 * rule's config read per request, by the limiter's plan and the admin API alike.
 */
import type { RuleConfig } from "./rules";

/** The limits one request gets under a rule. */
export interface EffectiveLimits {
  /** The tier these come from; `undefined` = the rule's own (no tier, or one the rule does not name). */
  tier: string | undefined;
  limit: number;
  periodMs: number;
  burst: number;
}

/**
 * The one tier resolver, shared by the limiter and the admin API: a named tier's own `limit` / `period` /
 * `burst` where it sets them (its `burst` defaulting to its `limit`), the rule's elsewhere; an unknown or
 * absent tier gets the rule's own.
 */
export function limitsFor(rule: RuleConfig, tierName: string | undefined): EffectiveLimits {
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
