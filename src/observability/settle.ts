/**
 * What a settlement shows (docs/settle.md, "Seeing it"): the Worker's `onSettle` observer. Once a response has
 * decided a request's units under rules that count by status or settle their cost, it writes
 * - one Analytics Engine data point per rule, the decision's layout (analytics.ts) with blob2 the outcome
 *   (`settled` | `given-back` | `kept` | `failed`) and three more doubles:
 *     double1 the settlement call's latency (ms)   double2 limit   double3 units left after a charge (else the
 *     decision's remaining)   double4 0   double5 units reserved at admission   double6 units moved after the
 *     response (> 0 charged, < 0 given back)   double7 the cost the response said (-1: it did not say)
 * - one log line `ratelimit.settled` per settled request (a rule settling its cost; a give-back of a status not
 *   counted alone, as for every successful login, is not logged): each rule's hashed identity, reserved,
 *   cost, applied and remaining;
 * - the dashboard's counts and each identity's last settlement (metrics.ts `recordSettled`).
 * Synchronous and never throwing. No raw identity, token, path or query is written.
 */
import { showHash } from "../identity/show";
import type { SettleEvent } from "../middleware";
import type { DataPoint, DataPointSink } from "./analytics";
import type { MetricsAggregator } from "./metrics";

/** Where a settlement's observations go. */
export interface SettleObserverOptions {
  /** The `RATE_LIMIT_ANALYTICS` binding, if any. */
  analytics?: DataPointSink | undefined;
  /** The isolate's dashboard counts, if any. */
  metrics?: Pick<MetricsAggregator, "recordSettled"> | undefined;
  /** Where log lines go. @default console.log */
  log?: (line: string) => void;
}

/** Builds the `onSettle` callback. */
export function createSettleObserver(options: SettleObserverOptions): (event: SettleEvent) => void {
  const log = options.log ?? ((line: string) => console.log(line));
  return function onSettle(event) {
    try {
      if (event.rules.length === 0) return;
      options.metrics?.recordSettled(event);
      if (options.analytics) {
        for (const point of settleDataPoints(event)) {
          try {
            options.analytics.writeDataPoint(point);
          } catch {
            // Analytics are best effort.
          }
        }
      }
      const line = settleLogLine(event);
      if (line) log(line);
    } catch {
      // Observability must never be the reason anything fails.
    }
  };
}

/** The data points of a settlement, in the layout above. */
export function settleDataPoints(event: SettleEvent): DataPoint[] {
  const cf = (event.request as { cf?: { colo?: unknown } }).cf;
  const colo = typeof cf?.colo === "string" ? cf.colo : "";
  return event.rules.map(({ result, outcome, reserved, applied, cost, remaining }) => ({
    indexes: [result.call.rule],
    blobs: [
      result.call.rule,
      outcome,
      result.call.mode,
      result.source,
      "",
      result.call.algorithm,
      event.request.method,
      colo,
    ],
    doubles: [
      event.durationMs,
      result.limit,
      remaining ?? result.remaining,
      0,
      reserved,
      applied,
      cost ?? -1,
    ],
  }));
}

/** The log line of a settlement, or `undefined` when it only gave back statuses a rule does not count. */
export function settleLogLine(event: SettleEvent): string | undefined {
  if (event.rules.every((r) => r.outcome === "given-back")) return undefined;
  return JSON.stringify({
    event: "ratelimit.settled",
    request_id: event.requestId,
    method: event.request.method,
    status: event.status,
    latency_ms: Math.round(event.durationMs * 10) / 10,
    rules: event.rules.map(({ result, outcome, reserved, applied, cost, remaining }) => ({
      rule: result.call.rule,
      outcome,
      mode: result.call.mode,
      identity: showHash(result.call.identityHash),
      reserved,
      ...(cost === undefined ? {} : { cost }),
      applied,
      ...(remaining === undefined ? {} : { remaining }),
    })),
  });
}
