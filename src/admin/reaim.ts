/**
 * An identity's state carried into the limits in force when an override changes them (lua/reaim.lua): the
 * admin API's step after each override set or removal. What was counted is kept as units, never as time.
 */
import type { RuleConfig } from "../config/rule-config";
import { traitsOf } from "../engine/algorithms";
import type { FenceLimits } from "../engine/keys";
import type { RedisPort } from "../engine/redis";
import { bucketReaimArguments, type Rate, reaimArguments, type ScriptCall } from "../engine/script";
import { type Deadline, NO_DEADLINE } from "../util/deadline";
import { ruleLimits, underOverride } from "./fence";
import type { Override, OverrideTarget } from "./overrides";

/** Whole µs per unit, as lua/decide/token-bucket.lua computes a bucket's emission interval. */
const intervalUs = (rate: Rate) => Math.ceil((rate.periodMs * 1000) / rate.limit);

/**
 * The one rate a bucket's identity gets under `override` (or the rule's own limits, without one), or
 * `undefined` when the rule's tiers give different ones: a client's tier is only known in its request.
 */
function bucketRate(own: readonly FenceLimits[], override: Override | null | undefined): Rate | undefined {
  const rates = override ? underOverride(own, override) : own;
  const [first] = rates;
  return first && rates.every((rate) => intervalUs(rate) === intervalUs(first)) ? first : undefined;
}

/** The re-aim call after `replaced` gave way to `setting` (`undefined`: the override removed), if one is due. */
function reaimCall(
  target: OverrideTarget,
  rule: RuleConfig,
  replaced: Override | null,
  setting: Override | undefined,
): ScriptCall | undefined {
  const { prefix, rule: name, identityHash } = target;
  const { shape, reaimsOnOverride } = traitsOf(rule.algorithm);
  if (shape === "bucket") {
    const own = ruleLimits(rule);
    const now = bucketRate(own, setting);
    const before = bucketRate(own, replaced);
    if (!now || !before || intervalUs(now) === intervalUs(before)) return undefined;
    return bucketReaimArguments(prefix, name, identityHash, now, before);
  }
  // A calendar period's counter ends with its period whatever an override says (lua/decide/calendar.lua).
  if (!reaimsOnOverride || rule.calendar) return undefined;
  const tiered = Object.values(rule.tiers).some((tier) => tier.periodMs !== undefined);
  const periodMs = setting?.periodMs ?? (tiered ? undefined : rule.periodMs);
  return periodMs === undefined ? undefined : reaimArguments(prefix, name, identityHash, periodMs);
}

/**
 * After an override of a rule was set (`setting`) or removed (`undefined`), replacing `replaced` (`null`: none),
 * what the identity's state counted is carried into the limits now in force, as units (docs/script.md, "Time"):
 * - a fixed-window counter is re-aimed at the end of the window now in force, its count kept. Needed because the
 *   decisions that follow a removal no longer read the override, so they trust the counter as it is; after a
 *   set, a longer window would otherwise lose the count when the shorter one ends;
 * - a token bucket's or GCRA's TAT is moved so that it owes the same units at the emission interval now in force
 *   as it owed before: the TAT is time, and the time owed at one rate is more units at a faster one, so a higher
 *   override would otherwise lengthen an exhausted client's wait
 *   (docs/operating.md, "How soon an override applies").
 * Where the rule's tiers give different periods (a counter) or rates (a bucket), the limits in force are not
 * known here (a tier comes from the client's request), and the state is left as it is. Other algorithms count
 * in units already. Past the `deadline` it is given up like a failed call.
 */
export async function reaimState(
  target: OverrideTarget,
  rule: RuleConfig,
  replaced: Override | null,
  setting: Override | undefined,
  redis: RedisPort,
  deadline: Deadline = NO_DEADLINE,
): Promise<void> {
  const call = reaimCall(target, rule, replaced, setting);
  if (!call) return;
  try {
    await deadline.within(() => redis.runScript(call.script, call.keys, call.args));
  } catch {
    // The override itself is written: the answer must say so. A counter only keeps its expiry, until its
    // window ends (or, after a set, until a decision that reads the override re-aims it); a TAT the time owed.
    console.warn(
      JSON.stringify({
        event: "override_state_not_reaimed",
        rule: target.rule,
        identity: `hash:${target.identityHash}`,
      }),
    );
  }
}
