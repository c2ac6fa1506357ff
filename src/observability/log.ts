/**
 * One structured JSON log line per denied request, per `monitor` would-deny and per request held for its
 * slot (`ratelimit.delayed`, with each rule's `delay_ms`), for Workers Logs /
 * Logpush / `wrangler tail`. It names the rules and the hashed identity (`hash:…`, which the admin API
 * accepts, so an operator can go from a log line to `GET /__floodgate/keys/<rule>/hash:…`); never a raw
 * identity, token, header or query string.
 */

import type { Decision } from "../engine/types";
import { showHash } from "../identity/show";
import { deniedForMs } from "../middleware/headers";
import { ruleVerdictOf } from "./verdict";

/**
 * The log line of a decision, or `undefined` when nothing was (or would have been) denied or delayed.
 * `requestId` is asked for only when there is a line: a request's id is made on first use.
 */
export function decisionLogLine(
  decision: Decision,
  method: string,
  requestId: () => string,
): string | undefined {
  // Most requests are allowed and not held: nothing to log, nothing to allocate.
  if (decision.results.every((r) => ruleVerdictOf(r) === "allowed" && !r.delayMs)) return undefined;
  const verdicts = decision.results.map(ruleVerdictOf);
  const shown = decision.results.filter(
    (r, i) => (verdicts[i] !== "allowed" && verdicts[i] !== "skipped") || r.delayMs,
  );
  if (shown.length === 0) return undefined;
  const denied = verdicts.some((v) => v === "denied" || v === "unavailable");
  const wouldDeny = verdicts.some((v) => v === "would-deny");
  return JSON.stringify({
    event: denied ? "ratelimit.denied" : wouldDeny ? "ratelimit.would_deny" : "ratelimit.delayed",
    request_id: requestId(),
    method,
    latency_ms: Math.round(decision.durationMs * 10) / 10,
    rules: shown.map((r) => ({
      rule: r.call.rule,
      verdict: ruleVerdictOf(r),
      mode: r.call.mode,
      identity: showHash(r.call.identityHash),
      limit: r.limit,
      remaining: r.remaining,
      // A denied rule's as its 429 says it (a cost above capacity: one period).
      retry_after_ms: r.outcome === "allowed" ? r.retryAfterMs : deniedForMs(r),
      ...(r.delayMs ? { delay_ms: r.delayMs } : {}),
      // A rule with a `block` (docs/protect.md, "Penalty box"): the block that denied it, or in `monitor`
      // the block a denial would have started.
      ...(r.blocked ? { block: r.blocked } : {}),
      ...(r.call.blockMs && r.call.mode === "monitor" && r.outcome === "denied"
        ? { would_block: true, block_ms: r.call.blockMs }
        : {}),
      source: r.source,
      ...(r.reason ? { reason: r.reason } : {}),
    })),
  });
}
