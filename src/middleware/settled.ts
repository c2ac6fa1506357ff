/**
 * What became of a request's units once its response was known (docs/settle.md, docs/counting.md): reported
 * to `onSettle` after the give-back of a status a rule does not count (src/middleware/count.ts) and after a
 * settlement (src/middleware/settle.ts), in the background, once Redis has answered. The Worker turns it into
 * a log line, Analytics Engine data points and the dashboard's counts (src/observability/settle.ts).
 */
import type { RuleResult } from "../engine/types";

/** One rule's units after the response. */
export interface SettledRule {
  /** The rule's decision: its call names the rule, the hashed identity and mode; `call.cost` was reserved. */
  result: RuleResult;
  /**
   * `settled`: charged or given back to the real cost the response said; `given-back`: a status the rule does
   * not count, its reservation returned; `kept`: the response did not say its cost, the reservation stands;
   * `failed`: Redis did not take the settlement or give-back, the reservation stands.
   */
  outcome: "settled" | "given-back" | "kept" | "failed";
  /** Units reserved at admission (`result.call.cost`). */
  reserved: number;
  /** Units moved after the response: > 0 charged, < 0 given back (what Redis gave back), 0 none. */
  applied: number;
  /** The cost the response said (`settled`); 0 for `given-back`; absent when unknown. */
  cost?: number;
  /** After a charge: the units the rule has left, negative = the identity's debt. */
  remaining?: number;
}

/** A request's settlement (or give-back), as `onSettle` receives it. */
export interface SettleEvent {
  request: Request;
  /** The request's id (its log lines and refund ledger entries carry it). */
  requestId: string;
  /** The status the Worker answered with (499: the client went away before its delayed slot). */
  status: number;
  /** Every rule of the request whose units the response decided. */
  rules: SettledRule[];
  /** How long the settlement or give-back call took, ms (0: none was needed). */
  durationMs: number;
}

/** Where a settlement is reported (the request's own facts added); `undefined`: nowhere. Never throws. */
export type SettleReport = ((event: Omit<SettleEvent, "request" | "requestId">) => void) | undefined;

/** A report that calls `onSettle`, ignoring its throw or rejection (an observer never fails anything). */
export function settleReport(
  onSettle: ((event: SettleEvent) => unknown) | undefined,
  request: Request,
  requestId: () => string,
): SettleReport {
  if (!onSettle) return undefined;
  return (event) => {
    try {
      const returned = onSettle({ ...event, request, requestId: requestId() });
      if (returned instanceof Promise) returned.catch(() => undefined);
    } catch {
      // Observing never fails the request.
    }
  };
}
