/**
 * The isolate's share of the deployment's all-time totals (`GET /__floodgate/metrics`, docs/monitoring.md):
 * decisions by rule, outcome and source, the decision latency histogram, failed Redis decisions by kind and
 * circuit breaker openings. Counted in memory on the request path (no I/O) and handed to the dashboard's
 * flush (metrics.ts) as `HINCRBY`s on one hash, so the totals are monotonic across isolates and restarts.
 * Also the isolate's lease units outstanding, written as a gauge of its own.
 */
import type { RedisCommand } from "../engine/redis";
import type { Decision } from "../engine/types";
import {
  type ActionVerdict,
  actionLabels,
  BREAKER_OPENS_FIELD,
  bucketOf,
  decisionSourceOf,
  decisionsField,
  ERROR_KINDS,
  errorsField,
  labelsOf,
  latencyField,
  latencySumField,
  LEASED_TTL_SECONDS,
  leasedKey,
  TOTALS_TTL_SECONDS,
  totalsKey,
} from "./families";

/** What the isolate counts on its own, cumulatively (the decider's health): flushed as differences. */
export interface IsolateCounters {
  /** Failed Redis decisions by kind since the isolate started. */
  errors: Readonly<Record<(typeof ERROR_KINDS)[number], number>>;
  /** Circuit breaker openings since the isolate started. */
  breakerOpens: number;
}

/** Where the totals' inputs come from besides decisions. */
export interface TotalsSources {
  /** The decider's cumulative counters (summed over endpoints). */
  counters?: () => IsolateCounters;
  /** Units this isolate holds on lease, unspent (absent with leases off). */
  leasedUnits?: () => number;
}

/** Most distinct fields counted between two flushes (rules × outcomes × sources stays far below). */
const MAX_FIELDS = 2000;

/** Counts one isolate's decisions toward the totals. */
export class TotalCounts {
  private pending = new Map<string, number>();
  /** The decider's counters as last flushed. */
  private flushed: IsolateCounters | undefined;
  /** This isolate's field in the leased-units hash (random, made once: no identity of anything). */
  private readonly isolate = crypto.randomUUID();

  constructor(
    private readonly prefix: string,
    private readonly sources: TotalsSources = {},
  ) {}

  /** Whether anything is waiting to be flushed. */
  get due(): boolean {
    return this.pending.size > 0;
  }

  /** Counts one decision (synchronous, no I/O). */
  record(decision: Decision): void {
    let counted = false;
    for (const result of decision.results) {
      const labels = labelsOf(result);
      if (labels === undefined) continue;
      this.add(decisionsField(result.call.rule, labels.outcome, labels.source), 1);
      counted = true;
    }
    if (!counted) return;
    const source = decisionSourceOf(decision);
    this.add(latencyField(source, bucketOf(decision.durationMs)), 1);
    this.add(latencySumField(source), Math.round(decision.durationMs * 1000));
  }

  /** Counts one `deny` rule's refusal (synchronous, no I/O): no Redis call, so no latency either. */
  recordAction(rule: string, verdict: ActionVerdict): void {
    const { outcome, source } = actionLabels(verdict);
    this.add(decisionsField(rule, outcome, source), 1);
  }

  /**
   * The commands that add what is pending to the totals, and forget it: best effort, as the dashboard's
   * counts (a flush that fails loses them rather than risk counting them twice).
   */
  commands(nowMs: number): RedisCommand[] {
    const key = totalsKey(this.prefix);
    const now = this.sources.counters?.();
    if (now) {
      const before = this.flushed;
      for (const kind of ERROR_KINDS)
        this.add(errorsField(kind), now.errors[kind] - (before?.errors[kind] ?? 0));
      this.add(BREAKER_OPENS_FIELD, now.breakerOpens - (before?.breakerOpens ?? 0));
      this.flushed = now;
    }
    const commands: RedisCommand[] = [];
    for (const [field, count] of this.pending) {
      if (count !== 0) commands.push(["hincrby", key, field, count]);
    }
    this.pending = new Map();
    if (commands.length > 0) commands.push(["expire", key, TOTALS_TTL_SECONDS]);
    if (this.sources.leasedUnits) {
      const leased = leasedKey(this.prefix, Math.floor(nowMs / 60_000));
      commands.push(
        ["hset", leased, this.isolate, `${this.sources.leasedUnits()}:${nowMs}`],
        ["expire", leased, LEASED_TTL_SECONDS],
      );
    }
    return commands;
  }

  private add(field: string, by: number): void {
    if (by === 0) return;
    const before = this.pending.get(field);
    if (before !== undefined || this.pending.size < MAX_FIELDS) this.pending.set(field, (before ?? 0) + by);
  }
}
