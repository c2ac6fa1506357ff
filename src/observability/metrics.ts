/**
 * Per-isolate decision counts for the dashboard. Nothing on the decision path touches a key shared by all
 * requests (under Upstash's per-key locking such a key would serialize every client): each isolate counts
 * in memory and flushes at most once every `METRICS_FLUSH_INTERVAL_MS`, in `waitUntil`, as one pipeline into
 * per-minute keys that expire after two hours:
 *
 *   <prefix>:metrics:<minute>               hash: `<rule>:<verdict>` → count (verdict.ts), `~decisions`,
 *                                           `~degraded:<reason>` (decisions not from Redis, by reason),
 *                                           `~lease` (decisions made in the isolate from leases),
 *                                           `~failed-open` / `~failed-closed` (Redis could not decide)
 *   <prefix>:metrics:<minute>:denied:<rule> sorted set: hashed identity → denials (incl. would-deny)
 *   <prefix>:metrics:<minute>:near:<rule>   sorted set: hashed identity → lowest remaining, ‰ of its capacity
 *   <prefix>:metrics:<minute>:peak:<rule>   sorted set: hashed identity → highest demand, ‰ of its capacity
 *                                           (units used after an allowed request; used + cost for a denied one,
 *                                           so above 1000 = denied), every tracked identity (`ZADD GT`)
 *   <prefix>:metrics:<minute>:paths:<rule>  sorted set: `<METHOD> <path>` → denials (incl. would-deny); the path
 *                                           without its query, id-like segments as `:id` ({@link routeOf})
 *
 * `<minute>` is Unix minutes by the isolate's clock: charts need no better, and no request waits for it.
 * Only hashed identities are kept (never a raw identity, IP or token). Counting is best effort: a flush
 * that fails is never retried on the request path; its minutes stay in memory (the last two hours' worth)
 * and go with the next flush, so what an isolate decided during an outage is counted once Redis answers again
 * (a flush cut short by a timeout may have landed anyway, and then counts twice). `pending()` shows them
 * meanwhile.
 *
 * The same flush carries the all-time totals `GET /__floodgate/metrics` reads (totals.ts). `minutes: false`
 * (a metrics token without the dashboard's admin token) writes only those.
 */
import type { RedisCommand, RedisPort } from "../engine/redis";
import { traitsOf } from "../engine/algorithms";
import type { Decision, RuleResult, WaitUntil } from "../engine/types";
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
  paths: (rule: string) => `${prefix}:metrics:${minute}:paths:${rule}`,
  peak: (rule: string) => `${prefix}:metrics:${minute}:peak:${rule}`,
});

/** The longest path kept, characters (a route, not a payload). */
const MAX_ROUTE_LENGTH = 120;
/**
 * A segment that may name a client rather than a route: one with a digit (an id, an IP address; a short
 * version such as `v2` excepted), an `@` or `:` (an email, an IPv6 address), a `%` escape (anything), long hex,
 * or a long run of token characters. A plain word (`users`, or a name such as `alice`) stays: the page then
 * shows it, so routes that carry client names should not be limited by path alone (docs/operating.md).
 */
const ID_SEGMENT = /^(?!v\d{1,2}$)(.*[\d@:%].*|[0-9a-f]{8,}|[A-Za-z0-9_~.=+-]{24,})$/i;

/**
 * A request's path as the dashboard lists it: no query string, and every segment that looks like an id
 * (`/users/8812/keys/3f9a…`) as `:id`, so that one route is counted once and a path carries no client's id or
 * token; at most 120 characters.
 */
export function routeOf(url: string): string {
  let path: string;
  try {
    path = new URL(url).pathname;
  } catch {
    return "?";
  }
  const route = path
    .split("/")
    .map((segment) => (ID_SEGMENT.test(segment) ? ":id" : segment))
    .join("/");
  return route.length > MAX_ROUTE_LENGTH ? `${route.slice(0, MAX_ROUTE_LENGTH)}…` : route;
}

/** The minute (Unix minutes) `ms` falls in. */
export const minuteOf = (ms: number): number => Math.floor(ms / 60_000);

interface Bucket {
  counts: Map<string, number>;
  /** rule → hashed identity → denials */
  denied: Map<string, Map<string, number>>;
  /** rule → hashed identity → lowest remaining seen, ‰ of its capacity ({@link capacityOf}) */
  near: Map<string, Map<string, number>>;
  /** rule → `<METHOD> <route>` → denials */
  paths: Map<string, Map<string, number>>;
  /** rule → hashed identity → highest demand seen, ‰ of its capacity (above 1000: denied) */
  peak: Map<string, Map<string, number>>;
}

/** What the request was, for the paths a rule denies most: its method and URL (only read on a denial). */
export interface RequestLine {
  method: string;
  url: string;
}

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

/** A result Redis could not decide (a timeout, an error, the breaker; the fallback limiter), not a deny-cache answer. */
const failedToDecide = (result: RuleResult): boolean =>
  result.source === "fallback" || (result.source === "undecided" && result.reason !== "deny_cache");

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

  /** Counts one decision (synchronous, no I/O); `request` names the path a denial was for. */
  record(decision: Decision, request?: RequestLine): void {
    if (decision.results.length === 0) return;
    this.totals?.record(decision);
    if (!this.minutes) return;
    const bucket = this.bucket(minuteOf(Date.now()));
    add(bucket.counts, "~decisions", 1);
    // A lease is Redis's answer given ahead of time: counted apart, not as degraded.
    if (decision.results.every((r) => r.source === "lease")) add(bucket.counts, "~lease", 1);
    const degraded = decision.results.find((r) => r.source !== "redis" && r.source !== "lease");
    if (degraded) add(bucket.counts, `~degraded:${degraded.reason ?? degraded.source}`, 1);
    if (decision.results.some(failedToDecide)) {
      const closed = decision.results.some((r) => ruleVerdictOf(r) === "unavailable");
      add(bucket.counts, closed ? "~failed-closed" : "~failed-open", 1);
    }
    for (const result of decision.results) {
      const verdict = ruleVerdictOf(result);
      if (verdict === "skipped") continue;
      const { rule, identityHash } = result.call;
      add(bucket.counts, `${rule}:${verdict}`, 1);
      if (verdict === "denied" || verdict === "would-deny") {
        add(tracked(bucket.denied, rule), identityHash, 1);
        if (request) add(tracked(bucket.paths, rule), `${request.method} ${routeOf(request.url)}`, 1);
      }
      if (result.source === "redis" && capacityOf(result) > 0 && verdict !== "unavailable") {
        // What the identity asked of the rule: what it holds after an allowed request, that plus this
        // request's cost for a denied one (more than the capacity). The dashboard's "what if" reads it.
        const used =
          capacityOf(result) - result.remaining + (result.outcome === "allowed" ? 0 : result.call.cost);
        const demand = Math.round((1000 * used) / capacityOf(result));
        const peaks = tracked(bucket.peak, rule);
        const before = peaks.get(identityHash);
        if (before === undefined ? peaks.size < MAX_TRACKED_IDENTITIES : demand > before) {
          peaks.set(identityHash, demand);
        }
      }
      if (verdict === "allowed" && result.source === "redis" && capacityOf(result) > 0) {
        const permille = Math.min(1000, Math.round((1000 * result.remaining) / capacityOf(result)));
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
      for (const [rule, identities] of bucket.peak) {
        const members = [...identities].flatMap(([member, demand]) => [demand, member]);
        if (members.length === 0) continue;
        // GT keeps each identity's highest demand across isolates; one ZADD carries every member.
        pipeline.push(["zadd", keys.peak(rule), "gt", ...members]);
        expire(keys.peak(rule));
      }
      for (const [rule, routes] of bucket.paths) {
        for (const [route, count] of top(routes, (a, b) => b - a)) {
          pipeline.push(["zincrby", keys.paths(rule), count, route]);
        }
        expire(keys.paths(rule));
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
      // Kept for the next flush (in the background, as every flush): no request pays for a retry.
      this.keep(buckets);
    }
    return pipeline.length;
  }

  /**
   * What this isolate counted and has not yet written (during an outage: every decision since it began),
   * summed over its minutes: decisions, those Redis could not decide (failed open / closed), and those not
   * from Redis by reason.
   */
  pending(): PendingCounts {
    const sum: PendingCounts = { decisions: 0, failedOpen: 0, failedClosed: 0, degraded: {} };
    for (const bucket of this.buckets.values()) {
      for (const [field, n] of bucket.counts) {
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

  /** Merges the minutes of a flush that failed back into the pending ones, dropping any past the keys' TTL. */
  private keep(unsent: Map<number, Bucket>): void {
    const oldest = minuteOf(Date.now()) - METRICS_TTL_SECONDS / 60;
    for (const [minute, from] of unsent) {
      if (minute <= oldest) continue;
      const into = this.bucket(minute);
      for (const [field, n] of from.counts) add(into.counts, field, n);
      for (const [rule, identities] of from.denied) {
        const seen = tracked(into.denied, rule);
        for (const [identity, n] of identities) add(seen, identity, n);
      }
      for (const [rule, identities] of from.peak) {
        const seen = tracked(into.peak, rule);
        for (const [identity, demand] of identities) {
          const before = seen.get(identity);
          if (before === undefined ? seen.size < MAX_TRACKED_IDENTITIES : demand > before)
            seen.set(identity, demand);
        }
      }
      for (const [rule, routes] of from.paths) {
        const seen = tracked(into.paths, rule);
        for (const [route, n] of routes) add(seen, route, n);
      }
      for (const [rule, identities] of from.near) {
        const seen = tracked(into.near, rule);
        for (const [identity, permille] of identities) {
          const before = seen.get(identity);
          if (before === undefined ? seen.size < MAX_TRACKED_IDENTITIES : permille < before)
            seen.set(identity, permille);
        }
      }
    }
  }

  private bucket(minute: number): Bucket {
    let bucket = this.buckets.get(minute);
    if (!bucket) {
      bucket = { counts: new Map(), denied: new Map(), near: new Map(), paths: new Map(), peak: new Map() };
      this.buckets.set(minute, bucket);
    }
    return bucket;
  }
}

/**
 * What a full state holds: a bucket's burst (token-bucket, gcra: a full bucket of limit 30 and burst 10 holds
 * 10), a window's limit. An override's burst is not in the result, so an overridden bucket counts against the
 * override's limit; the share is capped at 100 % either way.
 */
function capacityOf(result: RuleResult): number {
  if (!traitsOf(result.call.algorithm).takesBurst || result.overridden) return result.limit;
  return result.call.burst;
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
