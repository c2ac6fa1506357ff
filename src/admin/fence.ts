/**
 * The reset fence an admin change leaves beside one identity's state (docs/script.md, "Why a
 * reset's fence may be short" and "Returned units"): while it stands, no lease return or refund goes into the
 * state. A reset (routes-keys.ts) and an override set or removed (routes-overrides.ts) both raise it, sized
 * for every set of limits units taken before the change may have been taken under, and never shorten a fence
 * an earlier change left: it then stands as long as any return of units from before the change can land,
 * and no longer than the longest of those limits allows (so, as every key, it outlives its window by at most
 * one period; RESET_FENCE_MAX_MS at most), except after an override set on a bucket rule: RESET_FENCE_MAX_MS
 * then (see `fenceReturns`).
 */
import { limitsFor } from "../config/limits";
import type { RuleConfig } from "../config/rule-config";
import { type Algorithm, traitsOf } from "../engine/algorithms";
import { type FenceLimits, overrideKey, RESET_FENCE_MAX_MS, resetFenceMs } from "../engine/keys";
import type { RedisPort } from "../engine/redis";
import { fenceArguments } from "../engine/script";
import { type Deadline, NO_DEADLINE } from "../util/deadline";
import { getOverride, type Override, type OverrideTarget } from "./overrides";

/** The rule's own limits and each tier's: a client's tier is only known in its request. */
export const ruleLimits = (rule: RuleConfig): FenceLimits[] =>
  [undefined, ...Object.keys(rule.tiers)].map((tier) => ({
    ...limitsFor(rule, tier),
    delayMs: rule.delayMs,
  }));

/** `own` limits as `override` changes them, the way the script applies it (its period where it has one). */
export const underOverride = (own: readonly FenceLimits[], override: Override): FenceLimits[] =>
  own.map((l) => ({
    limit: override.limit,
    burst: override.burst,
    periodMs: override.periodMs ?? l.periodMs,
    delayMs: l.delayMs,
  }));

/**
 * How long the identity's fence must stand now: the longest fence of `own` limits and of each of them under
 * the identity's override as the script applies it (its `limit` and `burst`, its `period` where it has one).
 * Reads the override.
 */
export async function fenceMsOf(
  target: OverrideTarget,
  algorithm: Algorithm,
  own: readonly FenceLimits[],
  redis: RedisPort,
  deadline: Deadline = NO_DEADLINE,
): Promise<number> {
  return fenceMsFor(algorithm, own, await currentOverride(target, redis, deadline));
}

/** The identity's override as stored now, or `null`. */
const currentOverride = (target: OverrideTarget, redis: RedisPort, deadline: Deadline) =>
  deadline.within(() => getOverride(overrideKey(target.prefix, target.rule, target.identityHash), redis));

/** The longest fence of `own` limits and of each of them under `override`. */
const fenceMsFor = (algorithm: Algorithm, own: readonly FenceLimits[], override: Override | null) =>
  resetFenceMs(algorithm, override ? [...own, ...underOverride(own, override)] : own);

/** What a fence call deleted: state keys, and whether it lifted a block. */
export interface Fenced {
  deleted: number;
  lifted: boolean;
}

/**
 * Makes the identity's fence stand at least `ms` from now, never shortening one an earlier change left standing
 * longer, and with `reset` deletes the identity's state behind it (and with `reset.lift` its block), in one
 * script call (lua/fence.lua).
 */
export async function raiseFence(
  target: OverrideTarget,
  ms: number,
  redis: RedisPort,
  deadline: Deadline = NO_DEADLINE,
  reset?: { stateKeys: readonly string[]; bucket: boolean; lift?: boolean },
): Promise<Fenced> {
  const { prefix, rule, identityHash } = target;
  const { script, keys, args } = fenceArguments(
    prefix,
    rule,
    identityHash,
    ms,
    reset?.stateKeys,
    reset?.bucket,
    reset?.lift,
  );
  const reply = await deadline.within(() => redis.runScript(script, keys, args));
  const [deleted, lifted] = Array.isArray(reply) ? reply.map(Number) : [Number(reply), 0];
  return { deleted: deleted ?? 0, lifted: lifted === 1 };
}

/**
 * Before an override is set or removed: the fence, sized for the limits in force until now (`own`, and the
 * override being replaced), so that no return of units taken under them lands in state the change let start
 * afresh. A return is priced at the limits its lease was granted under, and a counter, sliding state or TAT
 * written under those limits again (the period changed and changed back, or the last short window inside a
 * long one ends with it) could pass for the one that took its units. And sized for the override being set,
 * `setting`, too: an earlier override of the same limits may have ended by its ttl (no fence then), and a
 * return priced at that one must not pass for one priced at this (docs/script.md, "Returned
 * units"). For a bucket that earlier override may have had a larger burst than this one (the script tells
 * them apart by limit and period only), so a bucket's set fences for as long as any return reaches,
 * RESET_FENCE_MAX_MS. Raised before the override is written, so a failure leaves both as they were. Only
 * under-admits: returns of units taken meanwhile lapse too. Resolves to the override being replaced (`null`:
 * none), which the change's last step reads (reaim.ts).
 */
export async function fenceReturns(
  target: OverrideTarget,
  algorithm: Algorithm,
  own: readonly FenceLimits[],
  setting: Override | undefined,
  redis: RedisPort,
  deadline: Deadline = NO_DEADLINE,
): Promise<Override | null> {
  const replaced = await currentOverride(target, redis, deadline);
  const setFor = !setting
    ? 0
    : traitsOf(algorithm).shape === "bucket"
      ? RESET_FENCE_MAX_MS
      : resetFenceMs(algorithm, underOverride(own, setting));
  const ms = Math.max(fenceMsFor(algorithm, own, replaced), setFor);
  if (ms > 0) await raiseFence(target, ms, redis, deadline);
  return replaced;
}
