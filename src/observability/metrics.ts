/**
 * Per-isolate decision counts for the dashboard. Nothing on the decision path touches a key shared by all
 * requests (under Upstash's per-key locking such a key would serialize every client): each isolate counts
 * in memory (minute-counts.ts) and flushes at most once every `METRICS_FLUSH_INTERVAL_MS`, in `waitUntil`, as
 * one pipeline (minute-commands.ts) into per-minute keys that expire after two hours (metric-keys.ts).
 *
 * Counting is best effort, and never twice: a flush that failed is never retried on the request path. One
 * Redis did not run (refused, unreachable, an error status) keeps its minutes in memory (the last two hours'
 * worth) and they go with the next flush, so what an isolate decided during an outage is counted once Redis
 * answers again. One cut short by its budget was sent and may have run (a frozen Redis runs it when it
 * resumes): it is not sent again, and lost if it never ran. `pending()` shows both meanwhile.
 *
 * The same flush carries the all-time totals `GET /__floodgate/metrics` reads (totals.ts). `minutes: false`
 * (a metrics token without the dashboard's admin token) writes only those.
 */
import type { RedisCommand, RedisPort } from "../engine/redis";
import { StoreError } from "../engine/store-error";
import type { Decision, WaitUntil } from "../engine/types";
import type { SettleEvent } from "../middleware/settled";
import { METRICS_TTL_SECONDS, minuteOf } from "./metric-keys";
import { minuteCommands } from "./minute-commands";
import type { ActionVerdict } from "./families";
import {
  countAction,
  countDecision,
  emptyMinute,
  type MinuteCounts,
  mergeMinute,
  type RequestLine,
} from "./minute-counts";
import { countSettled } from "./settled-counts";
import type { TotalCounts } from "./totals";

export { METRICS_TTL_SECONDS, metricsKeys, minuteOf } from "./metric-keys";
export { METRICS_TOP_PER_FLUSH } from "./minute-commands";
export type { RequestLine } from "./minute-counts";
export { routeOf } from "./route";
export { parseSettled, SETTLED_PER_FLUSH, type StoredSettlement } from "./settled-counts";

/** Minimum time between two flushes of one isolate, ms. */
export const METRICS_FLUSH_INTERVAL_MS = 5000;

/** An isolate's counts not yet written to Redis (`MetricsAggregator.pending`). */
export interface PendingCounts {
  decisions: number;
  /** Decisions Redis could not make, let through by `failure = "open"` (or by the fallback limiter). */
  failedOpen: number;
  /** Decisions Redis could not make, answered 503 by `failure = "closed"`. */
  failedClosed: number;
  /** Decisions not (fully) from Redis, by reason (`deny_cache` included: served locally, not a fault). */
  degraded: Record<string, number>;
}

/** What an aggregator counts besides the defaults. */
export interface AggregatorOptions {
  /** Minimum time between two flushes, ms. @default METRICS_FLUSH_INTERVAL_MS */
  intervalMs?: number;
  /** The all-time totals of `/__floodgate/metrics`, counted alongside (absent: not counted). */
  totals?: TotalCounts;
  /** Whether to keep the dashboard's per-minute counts. @default true */
  minutes?: boolean;
}

/** Counts decisions in memory and flushes them to Redis now and then. */
export class MetricsAggregator {
  /** Counted, not yet sent: minute → counts. */
  private unsent = new Map<number, MinuteCounts>();
  /** Sent by flushes that timed out, never sent again: shown by `pending()` until a flush goes through. */
  private unconfirmed = new Map<number, MinuteCounts>();
  private lastFlushMs = 0;
  /** Keys this isolate has already given their TTL (after a flush that succeeded): EXPIRE once, not per flush. */
  private expiring = new Set<string>();
  private readonly intervalMs: number;
  private readonly totals: TotalCounts | undefined;
  private readonly minutes: boolean;

  constructor(
    private readonly redis: RedisPort,
    private readonly prefix: string,
    options: AggregatorOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? METRICS_FLUSH_INTERVAL_MS;
    this.totals = options.totals;
    this.minutes = options.minutes ?? true;
  }

  /** Counts one decision (synchronous, no I/O); `request` names the path a denial was for. */
  record(decision: Decision, request?: RequestLine): void {
    if (decision.results.length === 0) return;
    this.totals?.record(decision);
    if (!this.minutes) return;
    countDecision(minuteIn(this.unsent, minuteOf(Date.now())), decision, request);
  }

  /** Counts one `deny` rule's refusal, or would-be refusal in monitor mode (synchronous, no I/O). */
  recordAction(rule: string, verdict: ActionVerdict): void {
    this.totals?.recordAction(rule, verdict);
    if (!this.minutes) return;
    countAction(minuteIn(this.unsent, minuteOf(Date.now())), rule, verdict);
  }

  /**
   * Counts one request's settlement or give-back (synchronous, no I/O): its rules' units, and each identity's
   * last settlement, which `GET /__floodgate/keys` shows (settled-counts.ts).
   */
  recordSettled(event: SettleEvent): void {
    if (!this.minutes || event.rules.length === 0) return;
    const nowMs = Date.now();
    countSettled(minuteIn(this.unsent, minuteOf(nowMs)), event, nowMs);
  }

  /** Starts a flush in the background when something is pending and the last one is old enough. */
  flushIfDue(waitUntil: WaitUntil): void {
    if (!this.due || Date.now() - this.lastFlushMs < this.intervalMs) return;
    waitUntil(this.flush());
  }

  private get due(): boolean {
    return this.unsent.size > 0 || (this.totals?.due ?? false);
  }

  /** Sends everything pending now, as one pipeline; never throws. Resolves to the commands sent. */
  async flush(): Promise<number> {
    if (!this.due) return 0;
    this.lastFlushMs = Date.now();
    const minutes = this.unsent;
    this.unsent = new Map();
    const pipeline: RedisCommand[] = [];
    const fresh: string[] = [];
    const expire = (key: string): boolean => {
      if (this.expiring.has(key)) return false;
      fresh.push(key);
      return true;
    };
    for (const [minute, counts] of minutes) minuteCommands(pipeline, this.prefix, minute, counts, expire);
    if (this.totals) pipeline.push(...this.totals.commands(this.lastFlushMs));
    try {
      await this.redis.pipeline(pipeline);
      // A flush that timed out before this one has run by now, or never will.
      this.unconfirmed = new Map();
      // Only now: a key whose EXPIRE was lost with a failed pipeline gets another next time.
      if (this.expiring.size > 10_000) this.expiring.clear();
      for (const key of fresh) this.expiring.add(key);
    } catch (error) {
      // Cut short by its budget: sent, maybe run. Sending it again could count it twice.
      const maybeRan = error instanceof StoreError && error.kind === "timeout";
      // Not run: kept for the next flush (in the background, as every flush): no request pays for a retry.
      mergeRecent(maybeRan ? this.unconfirmed : this.unsent, minutes);
    }
    return pipeline.length;
  }

  /**
   * What this isolate counted and has not seen written (during an outage: every decision since it began),
   * summed over its minutes: decisions, those Redis could not decide (failed open / closed), and those not
   * from Redis by reason.
   */
  pending(): PendingCounts {
    const sum: PendingCounts = { decisions: 0, failedOpen: 0, failedClosed: 0, degraded: {} };
    for (const minute of [...this.unsent.values(), ...this.unconfirmed.values()]) {
      for (const [field, n] of minute.counts) {
        if (field === "~decisions") sum.decisions += n;
        else if (field === "~failed-open") sum.failedOpen += n;
        else if (field === "~failed-closed") sum.failedClosed += n;
        else if (field.startsWith("~degraded:")) {
          const reason = field.slice("~degraded:".length);
          sum.degraded[reason] = (sum.degraded[reason] ?? 0) + n;
        }
      }
    }
    return sum;
  }
}

/** The counts of `minute` in `minutes`, made empty when new. */
function minuteIn(minutes: Map<number, MinuteCounts>, minute: number): MinuteCounts {
  let counts = minutes.get(minute);
  if (!counts) {
    counts = emptyMinute();
    minutes.set(minute, counts);
  }
  return counts;
}

/** Merges the minutes of a flush that failed into `into`, dropping any past the keys' TTL. */
function mergeRecent(into: Map<number, MinuteCounts>, from: Map<number, MinuteCounts>): void {
  const oldest = minuteOf(Date.now()) - METRICS_TTL_SECONDS / 60;
  for (const [minute, counts] of from) {
    if (minute > oldest) mergeMinute(minuteIn(into, minute), counts);
  }
}
