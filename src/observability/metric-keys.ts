/**
 * Where the dashboard's per-minute counts live in Redis (written by metrics.ts, read by src/dashboard):
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
 *                                           without its query, id-like segments as `:id` (route.ts)
 *   <prefix>:metrics:<minute>:settled:<rule> hash: hashed identity → its last settlement or give-back that
 *                                           minute (a rule counting by status or settling: settled-counts.ts,
 *                                           which also adds `<rule>:~reserved` and the like to the counts hash)
 *
 *   <prefix>:metrics:hints:<hour>          hash: `<rule>:<hashed identity>` → its masked hint (`mal…`, `203.0.113.x`),
 *                                           for the identities a flush lists; only with RATE_LIMIT_DASHBOARD_HINTS
 *
 * `<minute>` is Unix minutes by the isolate's clock (`<hour>` its hours): charts need no better, and no request
 * waits for it. Only hashed identities are kept (never a raw identity, IP or token), and hints, which are masked.
 */

/** Lifetime of a minute's keys, s: the dashboard's last hour plus a margin for clock skew between isolates. */
export const METRICS_TTL_SECONDS = 2 * 60 * 60;

/** The keys of one minute. */
export const metricsKeys = (prefix: string, minute: number) => ({
  counts: `${prefix}:metrics:${minute}`,
  denied: (rule: string) => `${prefix}:metrics:${minute}:denied:${rule}`,
  near: (rule: string) => `${prefix}:metrics:${minute}:near:${rule}`,
  paths: (rule: string) => `${prefix}:metrics:${minute}:paths:${rule}`,
  peak: (rule: string) => `${prefix}:metrics:${minute}:peak:${rule}`,
  settled: (rule: string) => `${prefix}:metrics:${minute}:settled:${rule}`,
});

/** The hash of the hints flushed in `hour` (Unix hours); the dashboard reads this hour's and the last one's. */
export const hintsKey = (prefix: string, hour: number): string => `${prefix}:metrics:hints:${hour}`;

/** The hint field of an identity under a rule. */
export const hintField = (rule: string, identityHash: string): string => `${rule}:${identityHash}`;

/** The minute (Unix minutes) `ms` falls in. */
export const minuteOf = (ms: number): number => Math.floor(ms / 60_000);
