/**
 * One minute of an isolate's decisions, counted in memory (synchronous, no I/O) until metrics.ts flushes it
 * into that minute's keys (metric-keys.ts). At most 1000 identities (or routes) per rule are tracked between
 * two flushes: more are not counted until the next one.
 */
import { traitsOf } from "../engine/algorithms";
import type { Decision, RuleResult } from "../engine/types";
import type { ActionVerdict } from "./families";
import { routeOf } from "./route";
import { ruleVerdictOf } from "./verdict";

/** Identities per rule tracked between two flushes; more are not counted until the next flush. */
const MAX_TRACKED_IDENTITIES = 1000;

/** What one minute's keys get at the next flush. */
export interface MinuteCounts {
  /** field of the minute's hash → count */
  counts: Map<string, number>;
  /** rule → hashed identity → denials */
  denied: Map<string, Map<string, number>>;
  /** rule → hashed identity → lowest remaining seen, ‰ of its capacity ({@link capacityOf}) */
  near: Map<string, Map<string, number>>;
  /** rule → `<METHOD> <route>` → denials */
  paths: Map<string, Map<string, number>>;
  /** rule → hashed identity → highest demand seen, ‰ of its capacity (above 1000: denied) */
  peak: Map<string, Map<string, number>>;
  /** rule → hashed identity → its last settlement (settled-counts.ts), most recent last */
  settled: Map<string, Map<string, string>>;
  /** rule → hashed identity → its masked hint (`RuleCall.hint`: only with `RATE_LIMIT_DASHBOARD_HINTS` on) */
  hints: Map<string, Map<string, string>>;
}

/** What the request was, for the paths a rule denies most: its method and URL (only read on a denial). */
export interface RequestLine {
  method: string;
  url: string;
}

/** A minute with nothing counted yet. */
export const emptyMinute = (): MinuteCounts => ({
  counts: new Map(),
  denied: new Map(),
  near: new Map(),
  paths: new Map(),
  peak: new Map(),
  settled: new Map(),
  hints: new Map(),
});

/** A result Redis could not decide (a timeout, an error, the breaker; the fallback limiter), not a deny-cache answer. */
const failedToDecide = (result: RuleResult): boolean =>
  result.source === "fallback" || (result.source === "undecided" && result.reason !== "deny_cache");

/** Counts one decision into `minute`; `request` names the path a denial was for. */
export function countDecision(minute: MinuteCounts, decision: Decision, request?: RequestLine): void {
  add(minute.counts, "~decisions", 1);
  // A lease is Redis's answer given ahead of time: counted apart, not as degraded.
  if (decision.results.every((r) => r.source === "lease")) add(minute.counts, "~lease", 1);
  // An async rule's decision is made in the isolate by design (docs/going-global.md): not degraded either.
  const degraded = decision.results.find(
    (r) => r.source !== "redis" && r.source !== "lease" && r.source !== "async",
  );
  if (degraded) add(minute.counts, `~degraded:${degraded.reason ?? degraded.source}`, 1);
  if (decision.results.some(failedToDecide)) {
    const closed = decision.results.some((r) => ruleVerdictOf(r) === "unavailable");
    add(minute.counts, closed ? "~failed-closed" : "~failed-open", 1);
  }
  for (const result of decision.results) {
    const verdict = ruleVerdictOf(result);
    if (verdict === "skipped") continue;
    const { rule, identityHash, hint } = result.call;
    add(minute.counts, `${rule}:${verdict}`, 1);
    if (hint !== undefined) keepLatest(tracked(minute.hints, rule), identityHash, hint);
    if (verdict === "denied" || verdict === "would-deny") {
      add(tracked(minute.denied, rule), identityHash, 1);
      if (request) add(tracked(minute.paths, rule), `${request.method} ${routeOf(request.url)}`, 1);
    }
    const capacity = capacityOf(result);
    if (result.source !== "redis" || capacity <= 0 || verdict === "unavailable") continue;
    // What the identity asked of the rule: what it holds after an allowed request, that plus this request's
    // cost for a denied one (more than the capacity). The dashboard's "what if" reads it.
    const used = capacity - result.remaining + (result.outcome === "allowed" ? 0 : result.call.cost);
    keepHighest(tracked(minute.peak, rule), identityHash, Math.round((1000 * used) / capacity));
    if (verdict === "allowed") {
      const permille = Math.min(1000, Math.round((1000 * result.remaining) / capacity));
      keepLowest(tracked(minute.near, rule), identityHash, permille);
    }
  }
}

/** Counts one `deny` rule's refusal into `minute`: the rule's count, as the dashboard's tables read it. */
export function countAction(minute: MinuteCounts, rule: string, verdict: ActionVerdict): void {
  add(minute.counts, `${rule}:${verdict}`, 1);
}

/** Adds the counts of `from` (a flush that failed) to `into` (counted since). */
export function mergeMinute(into: MinuteCounts, from: MinuteCounts): void {
  for (const [field, n] of from.counts) add(into.counts, field, n);
  mergeByRule(into.denied, from.denied, add);
  mergeByRule(into.peak, from.peak, keepHighest);
  mergeByRule(into.paths, from.paths, add);
  mergeByRule(into.near, from.near, keepLowest);
  for (const [rule, identities] of from.settled) {
    // Older than what was counted since: kept only where nothing newer is.
    const last = into.settled.get(rule) ?? new Map<string, string>();
    into.settled.set(
      rule,
      new Map([...identities].filter(([identity]) => !last.has(identity)).concat([...last])),
    );
  }
  // A hint of the failed flush is older than one counted since: kept only where nothing newer is.
  mergeByRule(into.hints, from.hints, keepIfAbsent);
}

/**
 * What a full state holds: a bucket's burst (token-bucket, gcra: a full bucket of limit 30 and burst 10 holds
 * 10), a window's limit. An override's burst is not in the result, so an overridden bucket counts against the
 * override's limit; the share is capped at 100 % either way.
 */
function capacityOf(result: RuleResult): number {
  if (!traitsOf(result.call.algorithm).takesBurst || result.overridden) return result.limit;
  return result.call.burst;
}

const add = (map: Map<string, number>, key: string, by: number) => {
  const before = map.get(key);
  if (before !== undefined || map.size < MAX_TRACKED_IDENTITIES) map.set(key, (before ?? 0) + by);
};

const keepHighest = (map: Map<string, number>, key: string, value: number) => {
  const before = map.get(key);
  if (before === undefined ? map.size < MAX_TRACKED_IDENTITIES : value > before) map.set(key, value);
};

const keepLowest = (map: Map<string, number>, key: string, value: number) => {
  const before = map.get(key);
  if (before === undefined ? map.size < MAX_TRACKED_IDENTITIES : value < before) map.set(key, value);
};

const keepLatest = (map: Map<string, string>, key: string, value: string) => {
  if (map.has(key) || map.size < MAX_TRACKED_IDENTITIES) map.set(key, value);
};

const keepIfAbsent = (map: Map<string, string>, key: string, value: string) => {
  if (!map.has(key) && map.size < MAX_TRACKED_IDENTITIES) map.set(key, value);
};

/** Folds each rule's values of `from` into `into`'s, one key at a time, with `keep`. */
function mergeByRule<V>(
  into: Map<string, Map<string, V>>,
  from: Map<string, Map<string, V>>,
  keep: (map: Map<string, V>, key: string, value: V) => void,
): void {
  for (const [rule, values] of from) {
    const seen = tracked(into, rule);
    for (const [key, value] of values) keep(seen, key, value);
  }
}

/** A rule's map of `byRule`, created empty on first use. */
function tracked<V>(byRule: Map<string, Map<string, V>>, rule: string): Map<string, V> {
  let values = byRule.get(rule);
  if (!values) {
    values = new Map();
    byRule.set(rule, values);
  }
  return values;
}
