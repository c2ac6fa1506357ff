/**
 * One structured JSON log line per denied request and per `monitor` would-deny, for Workers Logs /
 * Logpush / `wrangler tail`. It names the rules and the hashed identity (`hash:…`, which the admin API
 * accepts, so an operator can go from a log line to `GET /__floodgate/keys/<rule>/hash:…`); never a raw
 * identity, token, header or query string.
 */

import { showHash } from "../admin/identity";
import type { Decision } from "../engine/types";
import { verdictOf } from "./verdict";

/** The log line of a decision, or `undefined` when nothing was (or would have been) denied. */
export function decisionLogLine(decision: Decision, method: string, requestId: string): string | undefined {
  const denied = decision.results.filter((r) => verdictOf(r) === "denied" || verdictOf(r) === "unavailable");
  const wouldDeny = decision.results.filter((r) => verdictOf(r) === "would-deny");
  if (denied.length === 0 && wouldDeny.length === 0) return undefined;
  const shown = denied.length > 0 ? denied : wouldDeny;
  return JSON.stringify({
    event: denied.length > 0 ? "ratelimit.denied" : "ratelimit.would_deny",
    request_id: requestId,
    method,
    latency_ms: Math.round(decision.durationMs * 10) / 10,
    rules: shown.map((r) => ({
      rule: r.call.rule,
      verdict: verdictOf(r),
      mode: r.call.mode,
      identity: showHash(r.call.identityHash),
      limit: r.limit,
      remaining: r.remaining,
      retry_after_ms: r.retryAfterMs,
      source: r.source,
      ...(r.reason ? { reason: r.reason } : {}),
    })),
  });
}
