/**
 * The fail-open bound (docs/fail-open.md, "The bound"), checked for every algorithm: what the isolates' fallback
 * limiters let through, together with what Redis and leases admitted, per (rule, identity) and period.
 */
import { epochsOf, type Change } from "./epochs";
import { type Admission, checkBucket, checkHistory, floorOf, type Limits, type Violation } from "./model";
import type { Fault } from "./network";
import type { Scenario, SimRule } from "./scenario";

/** An admission a fail-open rule's fallback limiter made, and in which isolate. */
export type FellBack = Admission & { isolate: number };

/** Whether any fault of the scenario answers an error (Redis "down": refused, 5xx) rather than late or never. */
const errs = (f: Fault | undefined) => f?.kind === "error";
export const failsOutright = (scenario: Scenario): boolean =>
  scenario.ops.some(
    (o) =>
      (o.kind === "fault" && errs(o.fault)) ||
      (o.kind === "request" && errs(o.fault)) ||
      (o.kind === "burst" && errs(o.after?.fault)),
  );

/**
 * The share of a limit one isolate's fallback may add while Redis is slow, as docs/fail-open.md states it:
 * not the engine's constant, which a check must not follow when it changes.
 */
export const STATED_SHARE = 0.1;

/**
 * `limits` widened by `extra` units: the bound each algorithm's own check then holds a history to. A window's
 * limit or a log's grows; a bucket's burst does (the refill stays the rule's: the fallback adds units, not rate).
 */
export function widened(limits: Limits, extra: number): Limits {
  return limits.algorithm === "token-bucket" || limits.algorithm === "gcra"
    ? { ...limits, burst: limits.burst + extra }
    : { ...limits, limit: limits.limit + extra };
}

/**
 * Fail-open rules: what the isolates' fallback limiters let through, with what Redis and leases did, stays
 * within the bound docs/fail-open.md states per identity and period: the limit, plus per isolate that admitted
 * on its own ⌈10 % of the limit⌉ while Redis was slow (timeouts, lost replies), or the whole limit if Redis also
 * failed outright in the run (N × what Redis last left, at most the limit each). Per algorithm, "per period" is
 * that algorithm's own: an epoch-aligned window (fixed-window), any period (sliding-log), the weighted estimate
 * (sliding-window), any interval up to one period against burst + refill (token-bucket, gcra), slots held at
 * once (concurrency). An isolate knows an override only from Redis's figures, so the share is of the largest of
 * the rule's limit, its tiers' and the override's. Epochs as in the exact checks.
 */
export function checkFallbacks(
  scenario: Scenario,
  histories: ReadonlyMap<string, Admission[]>,
  fallbacks: ReadonlyMap<string, FellBack[]>,
  changes: ReadonlyMap<string, Change[]>,
): Violation[] {
  const out: Violation[] = [];
  const down = failsOutright(scenario);
  for (const [key, fell] of fallbacks) {
    const rule = scenario.rules[Number(key.split(" ")[0]?.slice(1))] as SimRule;
    const all = [...(histories.get(key) ?? []), ...fell];
    for (const epoch of epochsOf(rule, changes.get(key) ?? [], all)) {
      if (epoch.limits === "unknown") continue;
      const isolates = new Set(epoch.history.flatMap((a) => ("isolate" in a ? [a.isolate as number] : [])));
      if (isolates.size === 0) continue;
      const known = Math.max(rule.limit, epoch.limits.limit, ...(rule.tiers ?? []).map((t) => t.limit));
      const share = down ? known : Math.ceil(known * STATED_SHARE);
      const extra = isolates.size * share;
      const bound = widened(epoch.limits, extra);
      // A tier's own limits widen alike; an override replaces them.
      const own = epoch.limits === rule;
      // What each admission certainly holds whatever its response did (test/sim/after-response.ts).
      const history = epoch.history
        .map(
          ({ limits, ...a }): Admission => ({
            ...a,
            units: floorOf(a),
            ...(own && limits && { limits: widened(limits, extra) }),
          }),
        )
        .filter((a) => a.units > 0);
      const found =
        bound.algorithm === "token-bucket" || bound.algorithm === "gcra"
          ? checkBucket(bound, history, bound.periodMs)
          : checkHistory(bound, history);
      for (const v of found) {
        out.push({
          ...v,
          invariant: `fail-open: ${v.invariant} + ${isolates.size} isolate(s) × ${share} (${down ? "Redis failing" : "Redis slow"})`,
          detail: `${key}: ${v.detail}`,
        });
      }
    }
  }
  return out;
}
