/**
 * The decision observer the Worker hands to the pipeline's `onDecision`: Analytics Engine data points
 * (when `RATE_LIMIT_ANALYTICS` is bound), the dashboard's per-isolate counts (metrics.ts) and a log line
 * per denial / would-deny. Synchronous and never throwing, so observing a decision can neither slow nor
 * fail the request.
 */
import type { DecisionEvent } from "../middleware";
import { type DataPointSink, writeDecision } from "./analytics";
import { decisionLogLine } from "./log";
import type { MetricsAggregator } from "./metrics";

export type { DecisionEvent } from "../middleware";

/** Where observations go. */
export interface ObserverOptions {
  /** The `RATE_LIMIT_ANALYTICS` binding, if any. */
  analytics?: DataPointSink;
  /** The isolate's dashboard counts (metrics.ts), if any. */
  metrics?: Pick<MetricsAggregator, "record">;
  /** Where log lines go. @default console.log */
  log?: (line: string) => void;
}

/** Builds the `onDecision` callback. */
export function createDecisionObserver(options: ObserverOptions): (event: DecisionEvent) => void {
  const log = options.log ?? ((line: string) => console.log(line));
  return function onDecision(event) {
    const { decision, request } = event;
    try {
      if (decision.results.length === 0) return;
      options.metrics?.record(decision, request);
      if (options.analytics) writeDecision(options.analytics, decision, request.method, coloOf(request));
      const line = decisionLogLine(decision, request.method, () => event.requestId);
      if (line) log(line);
    } catch {
      // Observability must never be the reason a request fails.
    }
  };
}

/**
 * The Cloudflare colo, "" locally and off Workers (`request.cf` exists on Workers only). Read only when
 * analytics are bound: workerd builds the `cf` object on first access.
 */
function coloOf(request: Request): string {
  const cf = (request as { cf?: { colo?: unknown } }).cf;
  return typeof cf?.colo === "string" ? cf.colo : "";
}

export { type DataPoint, type DataPointSink, dataPointsOf } from "./analytics";
export { decisionLogLine } from "./log";
export { createSettleObserver, settleDataPoints, settleLogLine } from "./settle";
export { METRICS_FLUSH_INTERVAL_MS, MetricsAggregator, metricsKeys, minuteOf } from "./metrics";
export { TotalCounts } from "./totals";
export { type RuleVerdict, ruleVerdictOf } from "./verdict";
