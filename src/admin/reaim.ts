/**
 * Keeping a fixed-window counter on the window in force when an override changes it (lua/reaim.lua): the
 * admin API's step after each override set or removal.
 */
import type { RuleConfig } from "../config/rules";
import { traitsOf } from "../engine/algorithms";
import type { RedisPort } from "../engine/redis";
import { reaimArguments } from "../engine/script";
import { type Deadline, NO_DEADLINE } from "../util/deadline";
import type { Override, OverrideTarget } from "./overrides";

/**
 * After an override of a fixed-window rule was set (`override`) or removed (`undefined`): re-aims the
 * identity's live counter at the end of the window now in force, its count kept (docs/script.md,
 * "Time"). Needed because the decisions that follow a removal no longer read the override, so they trust
 * the counter as it is; after a set, a longer window would otherwise lose the count when the shorter one ends.
 * The period in force is the override's, else the rule's own; when some tier of the rule has a period of its
 * own it is not known here (a tier comes from the client's request), and after a removal the counter then
 * keeps its expiry (docs/operating.md, "How soon an override applies"). Other algorithms keep no such counter. Past the
 * `deadline` it is given up like a failed call.
 */
export async function reaimCounter(
  target: OverrideTarget,
  rule: RuleConfig,
  override: Override | undefined,
  redis: RedisPort,
  deadline: Deadline = NO_DEADLINE,
): Promise<void> {
  // A calendar period's counter ends with its period whatever an override says (lua/decide/calendar.lua).
  if (!traitsOf(rule.algorithm).reaimsOnOverride || rule.calendar) return;
  const tiered = Object.values(rule.tiers).some((tier) => tier.periodMs !== undefined);
  const periodMs = override?.periodMs ?? (tiered ? undefined : rule.periodMs);
  if (periodMs === undefined) return;
  const { script, keys, args } = reaimArguments(target.prefix, target.rule, target.identityHash, periodMs);
  try {
    await deadline.within(() => redis.runScript(script, keys, args));
  } catch {
    // The override itself is written: the answer must say so. The counter only keeps its expiry, until
    // its window ends (or, after a set, until a decision that reads the override re-aims it).
    console.warn(
      JSON.stringify({
        event: "override_counter_not_reaimed",
        rule: target.rule,
        identity: `hash:${target.identityHash}`,
      }),
    );
  }
}
