/**
 * The words of `GET /__floodgate/metrics` (docs/monitoring.md): what a rule's result is called there (its
 * `outcome` and `source` labels), the latency histogram's buckets, and where the all-time totals live in Redis.
 * One place, read by the isolates that count (totals.ts) and by the scrape that renders (exposition.ts).
 */
import type { Decision, RuleResult, Source } from "../engine/types";
import { ruleVerdictOf } from "./verdict";

/**
 * `floodgate_decisions_total`'s `outcome`. `blocked`: denied by a block that stood already (a rule's `block`,
 * docs/protect.md "Penalty box"); the denial that starts a block is `denied`.
 */
export const OUTCOMES = ["allowed", "denied", "would_deny", "blocked", "delayed", "shed"] as const;
export type MetricOutcome = (typeof OUTCOMES)[number];

/** `floodgate_decisions_total`'s `source`: where the answer came from (`fallback` = Redis could not decide). */
export const SOURCES = ["redis", "lease", "deny_cache", "fallback"] as const;
export type MetricSource = (typeof SOURCES)[number];

/** What a failed Redis decision is counted as (`StoreErrorKind`, src/engine/store-error.ts). */
export const ERROR_KINDS = ["timeout", "unavailable", "auth", "script"] as const;

/** Upper bounds of the decision latency histogram's buckets, seconds (`+Inf` comes after them). */
export const LATENCY_BUCKETS_SECONDS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
] as const;

const SOURCE_OF: Readonly<Record<Source, MetricSource>> = {
  redis: "redis",
  lease: "lease",
  // An async rule's decision (docs/going-global.md, "Async rules"): made in the isolate without a Redis call,
  // as a lease's is; the metric's sources are fixed (docs/monitoring.md).
  async: "lease",
  "deny-cache": "deny_cache",
  fallback: "fallback",
  // Not decided (Redis could not answer, no fallback applies): the rule's failure policy answered.
  undecided: "fallback",
};

/**
 * A rule's result as `floodgate_decisions_total` counts it, or `undefined` for a rule that was not evaluated
 * (another rule's cached denial answered the request first: src/observability/verdict.ts's `skipped`).
 * A fail-closed rule Redis could not decide (the request's 503) is `denied` from `fallback`.
 */
export function labelsOf(result: RuleResult): { outcome: MetricOutcome; source: MetricSource } | undefined {
  const verdict = ruleVerdictOf(result);
  if (verdict === "skipped") return undefined;
  const source = SOURCE_OF[result.source];
  switch (verdict) {
    case "allowed":
      return { outcome: result.delayMs ? "delayed" : "allowed", source };
    case "would-deny":
      return { outcome: "would_deny", source };
    case "unavailable":
      return { outcome: "denied", source };
    default:
      if (result.blocked === "standing") return { outcome: "blocked", source };
      return { outcome: result.call.algorithm === "shed" ? "shed" : "denied", source };
  }
}

/**
 * A `deny` rule's refusal (docs/lists.md) as `floodgate_decisions_total` counts it: `denied` (its 403), or
 * `would_deny` in monitor mode, from `deny_cache`: answered from what the isolate holds (the rule's match, its
 * copy of a live list), with no Redis call, as a remembered denial is.
 */
export const actionLabels = (verdict: ActionVerdict): { outcome: MetricOutcome; source: MetricSource } => ({
  outcome: verdict === "denied" ? "denied" : "would_deny",
  source: "deny_cache",
});

/** What a `deny` rule did to a request it matched: refused it (mode `on`), or would have (`monitor`). */
export type ActionVerdict = "denied" | "would-deny";

/** The source a whole decision's latency is filed under: `lease` when no rule asked Redis, the degraded one's, else `redis`. */
export function decisionSourceOf(decision: Decision): MetricSource {
  let leased = true;
  for (const result of decision.results) {
    if (result.source !== "redis" && result.source !== "lease") return SOURCE_OF[result.source];
    if (result.source !== "lease") leased = false;
  }
  return leased ? "lease" : "redis";
}

/**
 * The all-time totals: one hash per deployment, incremented by every isolate's flush. Fields:
 *   `d:<rule>:<outcome>:<source>`  decisions
 *   `l:<source>:<i>`               decisions whose latency fell in bucket i (i = buckets' length: above all)
 *   `ls:<source>`                  their latency summed, µs
 *   `e:<kind>`                     failed Redis decisions by kind
 *   `b`                            circuit breaker openings
 * Rule names are `[A-Za-z0-9_-]`, so `:` separates fields unambiguously.
 */
export const totalsKey = (prefix: string): string => `${prefix}:metrics:total`;

/**
 * Each isolate's lease units outstanding at its flushes in one minute (Unix minutes by its clock): field =
 * isolate id, value `<units>:<ms>`. Per minute, so that isolates gone leave nothing behind for long.
 */
export const leasedKey = (prefix: string, minute: number): string => `${prefix}:metrics:leased:${minute}`;

/** Lifetime of a minute's leased-units hash, s: the scrape reads this minute's and the last. */
export const LEASED_TTL_SECONDS = 180;

/**
 * How long the totals outlive the last flush, s. A deployment idle for longer starts again from zero: a
 * counter reset, which `rate()` and `increase()` handle.
 */
export const TOTALS_TTL_SECONDS = 35 * 24 * 60 * 60;

/** The leased units an isolate flushed count for this long, ms; older ones are of isolates gone (or idle, whose leases expired). */
export const LEASED_FRESH_MS = 30_000;

export const decisionsField = (rule: string, outcome: MetricOutcome, source: MetricSource): string =>
  `d:${rule}:${outcome}:${source}`;
export const latencyField = (source: MetricSource, bucket: number): string => `l:${source}:${bucket}`;
export const latencySumField = (source: MetricSource): string => `ls:${source}`;
export const errorsField = (kind: string): string => `e:${kind}`;
export const BREAKER_OPENS_FIELD = "b";

/** The bucket index of a latency in ms (the buckets' length when above them all). */
export function bucketOf(ms: number): number {
  const seconds = ms / 1000;
  const i = LATENCY_BUCKETS_SECONDS.findIndex((bound) => seconds <= bound);
  return i < 0 ? LATENCY_BUCKETS_SECONDS.length : i;
}
