/**
 * THE serializer of the rate-limit response headers (CONTRACT §4). Kept in one module because the IETF
 * draft may still rename `r`/`t` (PR #166): a later draft changes this file only.
 *
 * - `RateLimit-Policy` / `RateLimit`: draft-ietf-httpapi-ratelimit-headers-10/-11, Structured Field Lists
 *   of String items, one member per decided rule (serialized by the `structured-headers` package).
 * - `X-RateLimit-Limit` / `-Remaining` / `-Reset` for the strictest rule; Reset is delay-seconds until the
 *   rule is fully reset (window end or bucket full), never a timestamp.
 */
import { type Item, serializeList } from "structured-headers";
import type { RuleResult } from "../engine/types";

/** Whole seconds, rounded up: the draft has no sub-second precision and a client must never retry early. */
export const ceilSeconds = (ms: number): number => Math.max(0, Math.ceil(ms / 1_000));

/** The quota a result reports: concurrency counts requests in flight and has no window. */
function policyItem(result: RuleResult): Item {
  const params = new Map<string, number | string>([["q", result.limit]]);
  if (result.call.algorithm === "concurrency") params.set("qu", "concurrent-requests");
  else params.set("w", Math.max(1, ceilSeconds(result.call.periodMs)));
  return [result.call.rule, params];
}

/** `r` = available quota; `t` = seconds until more is available (0 when full); no `t` for concurrency. */
function limitItem(result: RuleResult): Item {
  const params = new Map<string, number>([["r", Math.max(0, Math.floor(result.remaining))]]);
  if (result.call.algorithm !== "concurrency") params.set("t", ceilSeconds(result.retryAfterMs));
  return [result.call.rule, params];
}

/**
 * The strictest result: a denied rule that frees up last, else the rule with the least quota left
 * (the one that will deny first), ties broken by the longest time to a full reset.
 */
export function strictest(results: readonly RuleResult[]): RuleResult | undefined {
  const denied = results.filter((r) => r.outcome !== "allowed");
  if (denied.length > 0) return denied.reduce((a, b) => (b.retryAfterMs > a.retryAfterMs ? b : a));
  return results.reduce<RuleResult | undefined>((a, b) => {
    if (a === undefined) return b;
    if (b.remaining !== a.remaining) return b.remaining < a.remaining ? b : a;
    return b.resetAfterMs > a.resetAfterMs ? b : a;
  }, undefined);
}

/**
 * Every rate-limit header for the results Redis (or the deny cache / fallback) actually decided.
 * Undecided results must be filtered out by the caller: a fail-open response carries no member for them.
 */
export function rateLimitHeaders(results: readonly RuleResult[]): Record<string, string> {
  if (results.length === 0) return {};
  const headers: Record<string, string> = {
    "RateLimit-Policy": serializeList(results.map(policyItem)),
    RateLimit: serializeList(results.map(limitItem)),
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
 * `Retry-After` for a 429, in whole seconds ≥ 1 and never earlier than any violated rule's `t`.
 * A cost more than the rule can ever grant waits one full period (retrying sooner cannot help);
 * a full concurrency rule says 1 s (slots free up as requests finish).
 */
export function retryAfterSeconds(violated: readonly RuleResult[]): number {
  let seconds = 1;
  for (const result of violated) {
    const wait =
      result.outcome === "cost-exceeds-capacity"
        ? Math.max(ceilSeconds(result.call.periodMs), ceilSeconds(result.retryAfterMs))
        : result.call.algorithm === "concurrency"
          ? 1
          : ceilSeconds(result.retryAfterMs);
    seconds = Math.max(seconds, wait);
  }
  return seconds;
}
