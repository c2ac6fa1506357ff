/**
 * Workers Analytics Engine: one data point per rule decided per request (a decision of N rules writes N), written when the
 * `RATE_LIMIT_ANALYTICS` binding exists (`writeDataPoint` is fire-and-forget: no await, no I/O on the path).
 *
 * Layout (query it with the SQL API; docs/operating.md, "Analytics Engine", has queries):
 *   index1  rule name (sampling key)
 *   blob1   rule        blob2 verdict (allowed | denied | would-deny | unavailable; see verdict.ts)
 *   blob3   mode (on | monitor)          blob4 source (redis | lease | deny-cache | fallback | undecided)
 *   blob5   degraded reason ("" when none; timeout | redis_error | breaker_open | auth | deny_cache |
 *           jwks_unavailable)
 *   blob6   algorithm   blob7 HTTP method   blob8 Cloudflare colo ("" locally)
 *   double1 decision latency (ms)        double2 limit      double3 remaining
 *   double4 retry after (ms, 0 when allowed)
 * No identity (raw or hashed), token, path or query is written. A request's settlement after its response
 * writes points of the same layout with three more doubles (settle.ts).
 */
import type { Decision } from "../engine/types";
import { ruleVerdictOf } from "./verdict";

/** One data point, as Workers' `AnalyticsEngineDataPoint` (declared here so the library builds off Workers). */
export interface DataPoint {
  indexes: string[];
  blobs: string[];
  doubles: number[];
}

/** What is used of Workers' `AnalyticsEngineDataset` binding. */
export interface DataPointSink {
  writeDataPoint(point: DataPoint): void;
}

/** The data points of one decision, in the layout above. */
export function dataPointsOf(decision: Decision, method: string, colo: string): DataPoint[] {
  const points: DataPoint[] = [];
  for (const result of decision.results) {
    const { call } = result;
    const verdict = ruleVerdictOf(result);
    // A rule that was not evaluated (another rule's cached denial answered) has nothing to chart.
    if (verdict === "skipped") continue;
    points.push({
      indexes: [call.rule],
      blobs: [
        call.rule,
        verdict,
        call.mode,
        result.source,
        result.reason ?? "",
        call.algorithm,
        method,
        colo,
      ],
      doubles: [
        decision.durationMs,
        result.limit,
        result.remaining,
        verdict === "allowed" ? 0 : result.retryAfterMs,
      ],
    });
  }
  return points;
}

/** Writes the decision's data points; a failing binding never fails the request. */
export function writeDecision(
  dataset: DataPointSink,
  decision: Decision,
  method: string,
  colo: string,
): void {
  for (const point of dataPointsOf(decision, method, colo)) {
    try {
      dataset.writeDataPoint(point);
    } catch {
      // Analytics are best effort: a full buffer or a local stub must not turn into a 500.
    }
  }
}
