/**
 * Per-isolate decision counts for the dashboard. Nothing on the decision path touches a key shared by all
 * requests (under Upstash's per-key locking such a key would serialize every client): each isolate counts
 * in memory and flushes at most once every `METRICS_FLUSH_INTERVAL_MS`, in `waitUntil`, as one pipeline into
 * per-minute keys that expire after two hours:
 *
 *   <prefix>:metrics:<minute>               hash: `<rule>:<verdict>` → count (verdict.ts), `~decisions`,
 *                                           `~degraded:<reason>` (decisions not from Redis, by reason),
 *                                           `~lease` (decisions made in the isolate from leases)
 *   <prefix>:metrics:<minute>:denied:<rule> sorted set: hashed identity → denials (incl. would-deny)
 *   <prefix>:metrics:<minute>:near:<rule>   sorted set: hashed identity → lowest remaining, ‰ of its limit
 *
 * `<minute>` is Unix minutes by the isolate's clock: charts need no better, and no request waits for it.
 * Only hashed identities are kept (never a raw identity, IP or token). Counting is best effort: a flush
 * that fails is dropped, never retried on the request path.
 *
 * The same flush carries the all-time totals `GET /__floodgate/metrics` reads (totals.ts). `minutes: false`
 * (a metrics token without the dashboard's admin token) writes only those.
 */
import type { RedisCommand, RedisPort } from "../engine/redis";
import type { Decision, WaitUntil } from "../engine/types";
import type { TotalCounts } from "./totals";
import { ruleVerdictOf } from "./verdict";

/** Minimum time between two flushes of one isolate, ms. */
export const METRICS_FLUSH_INTERVAL_MS = 5000;
/** Lifetime of a minute's keys, s: the dashboard's last hour plus a margin for clock skew between isolates. */
export const METRICS_TTL_SECONDS = 2 * 60 * 60;
/** Identities per rule sent per flush (top denied, and closest to their limit). */
export const METRICS_TOP_PER_FLUSH = 5;
/** Identities per rule tracked between two flushes; more are not counted until the next flush. */
const MAX_TRACKED_IDENTITIES = 1000;

/** The keys of one minute. */
export const metricsKeys = (prefix: string, minute: number) => ({
  counts: `${prefix}:metrics:${minute}`,
  denied: (rule: string) => `${prefix}:metrics:${minute}:denied:${rule}`,
  near: (rule: string) => `${prefix}:metrics:${minute}:near:${rule}`,
});

/** The minute (Unix minutes) `ms` falls in. */
export const minuteOf = (ms: number): number => Math.floor(ms / 60_000);

interface Bucket {
  counts: Map<string, number>;
  /** rule → hashed identity → denials */
  denied: Map<string, Map<string, number>>;
  /** rule → hashed identity → lowest remaining seen, ‰ of the limit */
  near: Map<string, Map<string, number>>;
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
  private buckets = new Map<number, Bucket>();
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

  /** Counts one decision (synchronous, no I/O). */
  record(decision: Decision): void {
    if (decision.results.length === 0) return;
    this.totals?.record(decision);
    if (!this.minutes) return;
    const bucket = this.bucket(minuteOf(Date.now()));
    add(bucket.counts, "~decisions", 1);
    // A lease is Redis's answer given ahead of time: counted apart, not as degraded.
    if (decision.results.every((r) => r.source === "lease")) add(bucket.counts, "~lease", 1);
    const degraded = decision.results.find((r) => r.source !== "redis" && r.source !== "lease");
    if (degraded) add(bucket.counts, `~degraded:${degraded.reason ?? degraded.source}`, 1);
    for (const result of decision.results) {
      const verdict = ruleVerdictOf(result);
      if (verdict === "skipped") continue;
      const { rule, identityHash } = result.call;
      add(bucket.counts, `${rule}:${verdict}`, 1);
      if (verdict === "denied" || verdict === "would-deny") {
        add(tracked(bucket.denied, rule), identityHash, 1);
      } else if (verdict === "allowed" && result.source === "redis" && result.limit > 0) {
        const permille = Math.round((1000 * result.remaining) / result.limit);
        const seen = tracked(bucket.near, rule);
        const before = seen.get(identityHash);
        if (before === undefined ? seen.size < MAX_TRACKED_IDENTITIES : permille < before) {
          seen.set(identityHash, permille);
        }
      }
    }
  }

  /** Starts a flush in the background when something is pending and the last one is old enough. */
  flushIfDue(waitUntil: WaitUntil): void {
    if (!this.due || Date.now() - this.lastFlushMs < this.intervalMs) return;
    waitUntil(this.flush());
  }

  private get due(): boolean {
    return this.buckets.size > 0 || (this.totals?.due ?? false);
  }

  /** Sends everything pending now, as one pipeline; never throws. Resolves to the commands sent. */
  async flush(): Promise<number> {
    if (!this.due) return 0;
    this.lastFlushMs = Date.now();
    const buckets = this.buckets;
    this.buckets = new Map();
    const pipeline: RedisCommand[] = [];
    const fresh: string[] = [];
    const expire = (key: string) => {
      if (this.expiring.has(key)) return;
      pipeline.push(["expire", key, METRICS_TTL_SECONDS]);
      fresh.push(key);
    };
    for (const [minute, bucket] of buckets) {
      const keys = metricsKeys(this.prefix, minute);
      for (const [field, count] of bucket.counts) {
        pipeline.push(["hincrby", keys.counts, field, count]);
      }
      expire(keys.counts);
      for (const [rule, identities] of bucket.denied) {
        for (const [identity, count] of top(identities, (a, b) => b - a)) {
          pipeline.push(["zincrby", keys.denied(rule), count, identity]);
        }
        expire(keys.denied(rule));
      }
      for (const [rule, identities] of bucket.near) {
        const members = top(identities, (a, b) => a - b).flatMap(([member, score]) => [score, member]);
        if (members.length === 0) continue;
        // LT keeps each identity's lowest remaining across isolates; one ZADD carries every member.
        pipeline.push(["zadd", keys.near(rule), "lt", ...members]);
        expire(keys.near(rule));
      }
    }
    if (this.totals) pipeline.push(...this.totals.commands(this.lastFlushMs));
    try {
      await this.redis.pipeline(pipeline);
      // Only now: a key whose EXPIRE was lost with a failed pipeline gets another next time.
      if (this.expiring.size > 10_000) this.expiring.clear();
      for (const key of fresh) this.expiring.add(key);
    } catch {
      // Best effort: the dashboard shows a gap rather than a request paying for a retry.
    }
    return pipeline.length;
  }

  private bucket(minute: number): Bucket {
    let bucket = this.buckets.get(minute);
    if (!bucket) {
      bucket = { counts: new Map(), denied: new Map(), near: new Map() };
      this.buckets.set(minute, bucket);
    }
    return bucket;
  }
}

const add = (map: Map<string, number>, key: string, by: number) => {
  const before = map.get(key);
  if (before !== undefined || map.size < MAX_TRACKED_IDENTITIES) map.set(key, (before ?? 0) + by);
};

function tracked(byRule: Map<string, Map<string, number>>, rule: string): Map<string, number> {
  let identities = byRule.get(rule);
  if (!identities) {
    identities = new Map();
    byRule.set(rule, identities);
  }
  return identities;
}

const top = (identities: Map<string, number>, order: (a: number, b: number) => number) =>
  [...identities].sort((a, b) => order(a[1], b[1])).slice(0, METRICS_TOP_PER_FLUSH);
