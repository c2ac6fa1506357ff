/**
 * What the decider knows about its own health, for `/__floodgate/health`: the breaker's state, the last
 * failure and whether Redis accepted our credentials. States only: no secret, no identity, no error text.
 */
import type { StoreErrorKind } from "../engine/store";
import type { DegradedReason } from "../engine/types";
import type { BreakerState, CircuitBreaker } from "./breaker";
import { AUTH_LOG_LINE, type DecisionFailure } from "./failure";

/** What `/__floodgate/health` reports about deciding. Contains no secret and no identity. */
export interface DeciderHealth {
  /** `degraded` while the breaker is not closed, the last decision failed, or the credentials were rejected. */
  status: "ok" | "degraded";
  breaker: BreakerState;
  /** Ms until the breaker lets a probe through; 0 unless open. */
  breakerRemainingMs: number;
  /** Failed decisions in a row. */
  consecutiveFailures: number;
  /** The most recent failure, if any since the isolate started. */
  lastFailure: { reason: DegradedReason; kind: StoreErrorKind; agoMs: number } | null;
  /** `rejected` after a REST 401 until Redis accepts a decision again. */
  credentials: "unknown" | "accepted" | "rejected";
  /** Failed decisions by kind since the isolate started (monotonic; docs/monitoring.md). */
  errors: Readonly<Record<StoreErrorKind, number>>;
  /** Times the breaker opened since the isolate started (monotonic). */
  breakerOpens: number;
}

/** Tracks failures and credentials; logs a credentials problem once (again only after they worked). */
export class HealthTracker {
  private lastFailure: (DecisionFailure & { atMs: number }) | null = null;
  private credentials: DeciderHealth["credentials"] = "unknown";
  private authLogged = false;
  private readonly errors: Record<StoreErrorKind, number> = {
    timeout: 0,
    unavailable: 0,
    auth: 0,
    script: 0,
  };

  constructor(
    private readonly log: (line: string) => void,
    private readonly now: () => number,
  ) {}

  /** Redis answered a decision. */
  succeeded(): void {
    this.credentials = "accepted";
    this.authLogged = false;
  }

  /** A decision failed. */
  failed(failure: DecisionFailure): void {
    this.lastFailure = { ...failure, atMs: this.now() };
    this.errors[failure.kind] += 1;
    if (failure.kind !== "auth") return;
    this.credentials = "rejected";
    if (!this.authLogged) this.log(AUTH_LOG_LINE);
    this.authLogged = true;
  }

  /** The report, with the breaker's view. */
  report(breaker: CircuitBreaker): DeciderHealth {
    const state = breaker.state;
    const degraded = state !== "closed" || breaker.failures > 0 || this.credentials === "rejected";
    const last = this.lastFailure;
    return {
      status: degraded ? "degraded" : "ok",
      breaker: state,
      breakerRemainingMs: breaker.remainingOpenMs(),
      consecutiveFailures: breaker.failures,
      lastFailure:
        last === null
          ? null
          : { reason: last.reason, kind: last.kind, agoMs: Math.max(0, this.now() - last.atMs) },
      credentials: this.credentials,
      errors: { ...this.errors },
      breakerOpens: breaker.opens,
    };
  }
}
