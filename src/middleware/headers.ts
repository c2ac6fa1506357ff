/**
 * THE serializer of the rate-limit response headers (docs/configuration.md, "Responses"). Kept in one module because a later
 * revision of the IETF draft (draft-ietf-httpapi-ratelimit-headers) may still rename `r`/`t`: it would change
 * this file only.
 *
 * - `RateLimit-Policy` / `RateLimit`: draft-ietf-httpapi-ratelimit-headers-10/-11, Structured Field Lists
 *   of String items, one member per decided rule (serialized by the `structured-headers` package).
 * - `X-RateLimit-Limit` / `-Remaining` / `-Reset` for the strictest rule; Reset is delay-seconds until the
 *   rule is fully reset (window end or bucket full), never a timestamp.
 */
import { serializeInteger, serializeString } from "structured-headers";
import { traitsOf } from "../engine/algorithms";
import type { RuleResult } from "../engine/types";

/** Whole seconds, rounded up: the draft has no sub-second precision and a client must never retry early. */
export const ceilSeconds = (ms: number): number => Math.max(0, Math.ceil(ms / 1_000));

// Members are written with the package's item serializers: its generic list serializer (Maps of
// parameters, type dispatch per value) cost ~2 % of a request's CPU for these fixed shapes.

/** Rule names as sf-strings, serialized once per name (rule names are few and fixed). */
const quotedNames = new Map<string, string>();
function quoted(rule: string): string {
  let text = quotedNames.get(rule);
  if (text === undefined) {
    text = serializeString(rule);
    quotedNames.set(rule, text);
  }
  return text;
}

/**
 * Each rule name's last policy item and what it was made of (its limits change only with a tier or an
 * override): most requests reuse the text instead of writing it again.
 */
const policies = new Map<string, { limit: number; periodMs: number; algorithm: string; text: string }>();

/**
 * The quota a result reports, with the limit and window in force (an override may change both); requests in
 * flight (concurrency: `AlgorithmTraits.rateLimitMember`) have no window.
 */
function policyItem(result: RuleResult): string {
  const { rule, algorithm } = result.call;
  const { limit, periodMs } = result;
  const last = policies.get(rule);
  if (last?.limit === limit && last.periodMs === periodMs && last.algorithm === algorithm) return last.text;
  const head = `${quoted(rule)};q=${serializeInteger(limit)}`;
  const text =
    traitsOf(algorithm).rateLimitMember === "concurrent-requests"
      ? `${head};qu="concurrent-requests"`
      : `${head};w=${serializeInteger(Math.max(1, ceilSeconds(periodMs)))}`;
  policies.set(rule, { limit, periodMs, algorithm, text });
  return text;
}

/**
 * `r` = available quota; `t` = seconds until more is available (0 when full); no `t` for requests in flight.
 * A request this rule held for its reserved slot also carries `delay-ms`, how long it waited (an extension
 * parameter: the draft lets a client ignore parameters it does not know).
 */
function limitItem(result: RuleResult): string {
  const head = `${quoted(result.call.rule)};r=${serializeInteger(Math.max(0, Math.floor(result.remaining)))}`;
  if (traitsOf(result.call.algorithm).rateLimitMember === "concurrent-requests") return head;
  const item = `${head};t=${serializeInteger(ceilSeconds(result.retryAfterMs))}`;
  return result.delayMs && result.call.mode === "on"
    ? `${item};delay-ms=${serializeInteger(result.delayMs)}`
    : item;
}

/**
 * The strictest result: a denied rule that frees up last, in the whole seconds `Retry-After` counts (ties: the
 * least quota left, then the lowest limit; two windows ending together read their PTTLs a moment apart, and
 * may differ by a ms), else the rule with the least quota left (the one that will deny first), ties broken by
 * the longest time to a full reset.
 */
export function strictest(results: readonly RuleResult[]): RuleResult | undefined {
  if (results.length === 1) return results[0]; // one rule, the common case: nothing to compare
  const denied = results.filter((r) => r.outcome !== "allowed");
  if (denied.length > 0) return denied.reduce((a, b) => (stricterDenial(b, a) ? b : a));
  return results.reduce<RuleResult | undefined>((a, b) => {
    if (a === undefined) return b;
    if (b.remaining !== a.remaining) return b.remaining < a.remaining ? b : a;
    return b.resetAfterMs > a.resetAfterMs ? b : a;
  }, undefined);
}

function stricterDenial(b: RuleResult, a: RuleResult): boolean {
  const waitB = ceilSeconds(deniedForMs(b));
  const waitA = ceilSeconds(deniedForMs(a));
  if (waitB !== waitA) return waitB > waitA;
  if (b.remaining !== a.remaining) return b.remaining < a.remaining;
  return b.limit < a.limit;
}

/**
 * Every rate-limit header for the results Redis (or the deny cache / fallback) actually decided.
 * Undecided results must be filtered out by the caller: a fail-open response carries no member for them.
 */
export function rateLimitHeaders(results: readonly RuleResult[]): Record<string, string> {
  if (results.length === 0) return {};
  const only = results.length === 1 ? results[0] : undefined;
  const headers: Record<string, string> = {
    "RateLimit-Policy": only ? policyItem(only) : results.map(policyItem).join(", "),
    RateLimit: only ? limitItem(only) : results.map(limitItem).join(", "),
  };
  const top = strictest(results);
  if (top) {
    headers["X-RateLimit-Limit"] = String(top.limit);
    headers["X-RateLimit-Remaining"] = String(Math.max(0, Math.floor(top.remaining)));
    headers["X-RateLimit-Reset"] = String(ceilSeconds(top.resetAfterMs));
  }
  return headers;
}

/**
 * How long a denied rule tells its client to wait, ms: when the same request would fit (`retryAfterMs`); a cost
 * more than the rule can ever grant, one full period (retrying sooner cannot help; its `retryAfterMs` is when
 * more quota comes, its `t`); a full rule of requests in flight (concurrency), 1 s (slots free up as requests
 * finish).
 */
export function deniedForMs(result: RuleResult): number {
  if (result.outcome === "cost-exceeds-capacity") return Math.max(result.periodMs, result.retryAfterMs);
  return traitsOf(result.call.algorithm).rateLimitMember === "concurrent-requests"
    ? 1_000
    : result.retryAfterMs;
}

/** `Retry-After` for a 429, in whole seconds ≥ 1 and never earlier than any violated rule's `t`. */
export function retryAfterSeconds(violated: readonly RuleResult[]): number {
  let seconds = 1;
  for (const result of violated) seconds = Math.max(seconds, ceilSeconds(deniedForMs(result)));
  return seconds;
}
