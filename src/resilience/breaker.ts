/**
 * Circuit breaker around Redis decisions, one per isolate (docs/failure-modes.md).
 *
 * After `failureThreshold` consecutive failed decisions it opens: no Redis call for `baseOpenMs`, then one
 * probe at a time (half-open). A failed probe reopens it for twice as long, up to `maxOpenMs`; a successful
 * one closes it and resets the cool-down. So a dead Redis costs one timeout per cool-down, not per request.
 *
 * Plain values only: workerd forbids sharing promises or I/O objects between requests, and a breaker
 * state that is a few numbers is safe to keep for the isolate's lifetime.
 */

/** `closed` calls Redis; `open` does not; `half-open` lets one probe through. */
export type BreakerState = "closed" | "open" | "half-open";

/** How bad each state is, for the worst of several endpoints: open > half-open > closed. */
export const BREAKER_RANK: Readonly<Record<BreakerState, number>> = { closed: 0, "half-open": 1, open: 2 };

/** Tuning of the breaker. Defaults follow the docs/failure-modes.md. */
export interface BreakerOptions {
  /** Consecutive failed decisions that open the breaker. @default 5 */
  failureThreshold?: number;
  /** First cool-down, ms. @default 1000 */
  baseOpenMs?: number;
  /** Longest cool-down, ms; each failed probe doubles the last one up to this. @default 10000 */
  maxOpenMs?: number;
  /**
   * How long a probe may be outstanding before another request may probe, ms. A probe is bounded by
   * the decision budget, but a request that is cancelled mid-probe never reports back.
   * @default 5000
   */
  probeLeaseMs?: number;
}

/** What the caller may do for one decision. */
export type Admission = "call" | "probe" | "skip";

/** The breaker. `now` is in ms (`Date.now()` in production; injectable for tests). */
export class CircuitBreaker {
  private readonly failureThreshold: number;
  private readonly baseOpenMs: number;
  private readonly maxOpenMs: number;
  private readonly probeLeaseMs: number;

  private consecutiveFailures = 0;
  /** 0 while closed. */
  private openUntilMs = 0;
  private lastOpenMs = 0;
  /** Start of the outstanding probe; 0 when none. */
  private probeStartedMs = 0;
  /** Times it opened (or reopened) since the isolate started: `floodgate_breaker_opens_total` (docs/monitoring.md). */
  private openings = 0;

  constructor(
    options: BreakerOptions = {},
    private readonly now: () => number = Date.now,
  ) {
    this.failureThreshold = Math.max(1, options.failureThreshold ?? 5);
    this.baseOpenMs = options.baseOpenMs ?? 1000;
    this.maxOpenMs = Math.max(this.baseOpenMs, options.maxOpenMs ?? 10_000);
    this.probeLeaseMs = options.probeLeaseMs ?? 5000;
  }

  /** The state right now (an elapsed cool-down reads as `half-open`). */
  get state(): BreakerState {
    if (this.openUntilMs === 0) return "closed";
    return this.now() < this.openUntilMs ? "open" : "half-open";
  }

  /** Failed decisions in a row (reset by any success). */
  get failures(): number {
    return this.consecutiveFailures;
  }

  /** Times it opened or reopened since it was made (monotonic). */
  get opens(): number {
    return this.openings;
  }

  /** Ms until a probe may be sent; 0 when closed or half-open. */
  remainingOpenMs(): number {
    if (this.openUntilMs === 0) return 0;
    return Math.max(0, this.openUntilMs - this.now());
  }

  /** Asks whether this decision may call Redis. A `probe` must be followed by `success` or `failure`. */
  admit(): Admission {
    const state = this.state;
    if (state === "closed") return "call";
    if (state === "open") return "skip";
    const now = this.now();
    if (this.probeStartedMs !== 0 && now - this.probeStartedMs < this.probeLeaseMs) return "skip";
    this.probeStartedMs = now;
    return "probe";
  }

  /** Redis answered. Closes the breaker. */
  success(): void {
    this.consecutiveFailures = 0;
    this.openUntilMs = 0;
    this.lastOpenMs = 0;
    this.probeStartedMs = 0;
  }

  /**
   * Redis could not answer. `probe` says whether this was the decision `admit()` let through as the probe.
   * Returns `true` if this failure opened (or reopened) the breaker, so the caller can log it once.
   */
  failure(probe: boolean): boolean {
    this.consecutiveFailures += 1;
    if (probe) {
      // A failed probe doubles the cool-down, up to maxOpenMs.
      this.open(Math.min(this.maxOpenMs, Math.max(this.baseOpenMs, this.lastOpenMs * 2)));
      return true;
    }
    // Calls admitted before the breaker opened may fail late; they must not extend the cool-down.
    if (this.openUntilMs !== 0 || this.consecutiveFailures < this.failureThreshold) return false;
    this.open(this.baseOpenMs);
    return true;
  }

  private open(forMs: number): void {
    this.openings += 1;
    this.lastOpenMs = forMs;
    this.openUntilMs = this.now() + forMs;
    this.probeStartedMs = 0;
  }
}
