/**
 * The engine's vocabulary: what the Worker asks Redis to decide, and what comes back.
 * The limiting logic itself lives in `lua/` (docs/script.md); these types only describe its inputs and outputs.
 */
import type { CalendarBounds } from "../util/calendar";
import type { RunningTimer } from "../util/timer";
import { type Algorithm, traitsOf } from "./algorithms";

/** The algorithms, their names and traits: src/engine/algorithms.ts. */
export { ALGORITHMS, type Algorithm } from "./algorithms";

/**
 * The most one request of `call` can ever be granted under its own limits: a bucket's burst, a window's limit.
 * A larger cost is `cost-exceeds-capacity`, and only the script says so.
 */
export const capacityOf = (call: RuleCall): number =>
  traitsOf(call.algorithm).takesBurst ? call.burst : call.limit;

/**
 * Whether two calls of one rule and identity run under the same limits: tiers of one limit may differ in
 * period or burst, and share the identity's state.
 */
export const sameLimits = (a: RuleCall, b: RuleCall): boolean =>
  a.algorithm === b.algorithm && a.limit === b.limit && a.periodMs === b.periodMs && a.burst === b.burst;

/** `on` enforces, `monitor` counts and reports but never denies, `off` is never sent to Redis. */
export const MODES = ["on", "off", "monitor"] as const;
export type Mode = (typeof MODES)[number];

/** What a rule does when Redis cannot answer in time. */
export const FAILURES = ["open", "closed"] as const;
export type FailurePolicy = (typeof FAILURES)[number];

/** One rule's share of a decision, fully resolved by the edge (tier applied; an override is read in Lua). */
export interface RuleCall {
  /** Rule name, `[A-Za-z0-9_-]{1,64}`; part of the Redis key. */
  rule: string;
  algorithm: Algorithm;
  /** Requests (or cost units) per period; for `concurrency`, requests in flight. */
  limit: number;
  /** Window length; for `concurrency`, the lease after which an unreleased slot is freed. */
  periodMs: number;
  /** Token-bucket capacity / GCRA burst (requests a fresh identity may send at once). */
  burst: number;
  /** Units this request consumes (always 1 for `concurrency`). */
  cost: number;
  /** `shed` rules: the request's priority class (for logs and the 503's body). */
  priorityClass?: string;
  /**
   * Token-bucket / GCRA only: the longest a request over the rate may be held for its reserved slot, ms;
   * beyond it the request is denied. @default 0 (deny at once)
   */
  delayMs?: number;
  /** `on` rules can deny; `monitor` rules are counted and reported only. */
  mode: Exclude<Mode, "off">;
  failure: FailurePolicy;
  /** The identity, already hashed (never a raw API key, token or IP). */
  identityHash: string;
  /**
   * A masked form of the identity (`mal…`, `203.0.113.x`, src/identity/show.ts) for the dashboard, only when
   * `RATE_LIMIT_DASHBOARD_HINTS` is on: never the raw value, and never sent to the script.
   */
  hint?: string;
  /**
   * Whether this identity may have an override under this rule: the script then reads the override key in
   * the same atomic call. `false` skips that read (one billed command less); absent = read it (safe).
   * @default true
   */
  override?: boolean;
  /** `false` = never decided from a lease (the rule's `lease = false`); concurrency never is. @default true */
  lease?: boolean;
  /**
   * The rule's `sync = "async"`: decided in the isolate from its last known state and counted in Redis after
   * the response (src/leases/async.ts, docs/going-global.md). Absent = exact.
   */
  sync?: "async";
  /**
   * Its units may go back once the response is known (a rule counting by status: docs/counting.md), at any
   * moment and from any instance: a denial under it is never answered from the deny cache. @default false
   */
  givesBackAfterResponse?: boolean;
  /**
   * A fixed-window rule over calendar periods: the boundaries around the edge's clock, among which the script
   * picks by Redis's (lua/decide/calendar.lua); `periodMs` is then the current period's length as the edge
   * sees it, and a result's the one Redis chose. Absent = windows aligned to the epoch.
   */
  calendar?: CalendarBounds;
  /**
   * The rule's `block`, ms: in mode `on`, a denial by this rule keeps the identity denied by it for this long
   * (docs/protect.md, "Penalty box"); in `monitor`, reported only (`would_block`). Absent = no block.
   */
  blockMs?: number;
  /**
   * Set by the edge when the call is not the rule's own: `jwks_unavailable` = a `jwt:` part could not be
   * checked (docs/failure-modes.md), so the identity is the client IP and the tier the rule's own. Every
   * result of the call carries it unless a degraded answer has a reason of its own.
   */
  reason?: DegradedReason;
}

/**
 * One rule's share of a refund (`Store.refund`): `cost` is the units to give back; the rest is the call as it
 * was decided (its own limits bound how far back a refund may reach: `outlivesFence` in src/engine/store.ts).
 */
export interface RefundCall extends RuleCall {
  /**
   * The limits the units were taken under: the refund is priced at them, not at those in force when it lands
   * (an override set or ended since must not make it give back more time or count than was taken). Absent =
   * the limits in force then (`override` as in a decision). `overridden`: units taken under an override, which
   * go back only while an override of these limits is still in force (one that ended by its `ttl` may leave
   * state that never counted them: docs/script.md, "Returned units"); `refundOf`
   * (src/engine/results.ts) sets it where that matters.
   */
  pricedAt?: {
    limit: number;
    periodMs: number;
    overridden: boolean;
    /**
     * A split decision's stamp, for a token-bucket/GCRA rule: the TAT its units' decision wrote, when, and
     * the TAT it replaced. Only the part of their time still ahead of now goes back, or with a `delay` the
     * replaced TAT while the written one stands. Absent = all of it (a lease's return compares its own TAT).
     */
    stamp?: Reservation | undefined;
  };
}

/** Whether `call` answers 503 when Redis cannot decide it: an enforcing rule whose failure policy is `closed`. */
export const failsClosed = (call: RuleCall): boolean => call.mode === "on" && call.failure === "closed";

/** How one rule judged the request. */
export type Outcome = "allowed" | "denied" | "cost-exceeds-capacity";

/**
 * Where a rule's result came from: `redis` now, or `lease` (units Redis granted ahead of time: docs/leases.md);
 * anything else is a degraded answer and says why.
 */
export type Source = "redis" | "lease" | "async" | "deny-cache" | "fallback" | "undecided";

/** Units a decision leased for the isolate to spend locally (lua/lease.lua). */
export interface LeaseGrant {
  /** Units taken in Redis, this request's cost included. */
  units: number;
  /** How long the units may be spent, ms from before the call was sent. */
  lifeMs: number;
  /** Redis's clock at the grant, µs: the "when" of a window's or a log's later refund. */
  whenUs: number;
  /** Token-bucket/GCRA: the TAT the grant wrote, µs (the "when" of its refund); otherwise 0. */
  tatUs: number;
  /** The period in force at the grant, ms: the same as its result's `periodMs`. */
  periodMs: number;
}

/**
 * Why a result did not come the normal way: Redis could not decide (`timeout`, `redis_error`, `breaker_open`,
 * `auth`), the deny cache answered (`deny_cache`), or the call itself was not the rule's own (`RuleCall.reason`).
 */
export type DegradedReason =
  | "timeout"
  | "redis_error"
  | "breaker_open"
  | "auth"
  | "deny_cache"
  | "jwks_unavailable";

/** One rule's verdict. Times are milliseconds from now, as measured by Redis's clock. */
export interface RuleResult {
  call: RuleCall;
  outcome: Outcome;
  /** The limit in force after tier and override. */
  limit: number;
  /**
   * The period in force after tier and override, ms: the call's own unless an override of the identity
   * changed it (the window `RateLimit-Policy` advertises). For `concurrency`, the slot lease.
   */
  periodMs: number;
  /**
   * Whether an override of the identity set the limits in force (`limit`, `periodMs`, a bucket's burst): only
   * Redis knows, in the call that read it; a result from a lease or the deny cache repeats the one it stands for.
   */
  overridden: boolean;
  /**
   * Quota available after this decision, never negative: after this request's consumption when it was
   * counted; as it stands now when nothing was written (denied, peeked, or another rule denied).
   */
  remaining: number;
  /** Until the rule is fully reset: window end, or bucket full. 0 when already full. */
  resetAfterMs: number;
  /**
   * For a denied rule: when the same request (same cost) would be allowed, absent other traffic (concurrency:
   * when the earliest lease runs out). For an allowed one, and for a cost above what the rule can ever grant
   * (no wait would let it in): until more quota is available (window end; next whole unit for
   * token-bucket/gcra; 0 when full or for concurrency; a limit of 0: one period).
   */
  retryAfterMs: number;
  source: Source;
  reason?: DegradedReason;
  /** Set when the decision leased more units than the request's cost for this rule. */
  lease?: LeaseGrant;
  /**
   * An allowed token-bucket/GCRA request over the rate that got a reserved slot instead of a denial: how
   * long it must wait for that slot, ms (never more than its call's `delayMs`). Absent = not delayed.
   */
  delayMs?: number;
  /** What a give-back needs (`Decider.release`) when a delayed request's client went away. */
  reservation?: Reservation;
  /**
   * A denial of a rule with a `block` that a block answers: `started` (this denial started it) or `standing`
   * (it stood already: whatever the rate says). `retryAfterMs` and `resetAfterMs` are then the block's end,
   * and nothing but an admin reset ends it sooner. Absent = not a block's denial.
   */
  blocked?: "started" | "standing";
}

/** A token-bucket/GCRA rule's state as one allowed call left it: the TAT it wrote and the one it replaced. */
export interface Reservation {
  /** µs, Redis's clock. */
  tatUs: number;
  /** µs, Redis's clock. */
  previousTatUs: number;
  /** Redis's clock when it wrote, µs. */
  writtenAtUs: number;
}

/** The answer to one request: allowed only if every `on` rule allows it. */
export interface Decision {
  allowed: boolean;
  /** One per rule sent, in the same order. */
  results: RuleResult[];
  /** How long the decision took at the edge, for `Server-Timing`. */
  durationMs: number;
}

/** Per-decision options. */
export interface DecideOptions {
  /**
   * What is left of the request's Redis budget, ms, when something else already waited on Redis for this
   * request (a fresh isolate's live-mode read): no request waits on Redis longer than `RATE_LIMIT_TIMEOUT_MS`.
   * 0 or less: the decider does not call Redis; the rules follow their failure policy (reason `timeout`).
   * @default the decider's whole `timeoutMs`
   */
  budgetMs?: number;
  /**
   * Aborts the decision's Redis requests (the decider's one timer per decision). Without it the store
   * keeps `budgetMs` with a timer of its own.
   */
  signal?: AbortSignal;
  /**
   * The region whose database decides the request from the units the primary leased to it (docs/regions.md);
   * absent, or a region the engine does not know: the primary decides.
   */
  region?: string;
  /** Ask for leases (lua/lease.lua): units wanted per call, cost included; longest life, ms. */
  lease?: { units: readonly number[]; maxMs: number };
  /**
   * Ask for the TAT each written token-bucket/GCRA rule wrote, and when (`RuleResult.reservation`): what a
   * split decision's refund needs (src/resilience/sharded.ts).
   */
  stamps?: boolean;
  /**
   * Keeps background work alive after the response (`executionCtx.waitUntil`): a request spanning several
   * slot groups that is not let through gives back what its allowing groups consumed there.
   * @default the work runs on unawaited
   */
  waitUntil?: WaitUntil;
  /**
   * Told of the timer the decider started for the budget (it runs on after the decision), so that a later
   * step of the request can hang its own on it (src/util/timer.ts).
   */
  onTimer?: (timer: RunningTimer) => void;
}

/**
 * A settlement (a rule's `settle`: src/middleware/settle.ts): the response said the request allowed by `result`
 * cost `units` more (> 0: charged, lua/settle.lua) or fewer (< 0: given back as a refund proves it may,
 * lua/refund.lua) than its admission charged.
 */
export interface Settlement {
  result: RuleResult;
  /** Signed units: the real cost less the reservation (`result.call.cost`); never 0. */
  units: number;
}

/** What one settlement did: units charged (> 0) or given back (< 0), and for a charge what the rule has left. */
export interface SettledUnits {
  /** Units charged, or given back (negative); 0 = nothing moved. */
  applied: number;
  /** A charge's units available after it, negative = the identity's debt; absent for a give-back. */
  remaining?: number;
}

/** Schedules work that may outlive the response (`executionCtx.waitUntil`). */
export type WaitUntil = (promise: Promise<unknown>) => void;

/**
 * Decides a request's rules. Never throws: a rule Redis could not decide comes back with
 * `source: "undecided"` (or `fallback` / `deny-cache`) and a `reason`; the caller applies its `failure` policy.
 */
export interface Decider {
  decide(calls: RuleCall[], requestId: string, options?: DecideOptions): Promise<Decision>;
  /**
   * The decision this decider can make at once, with no Redis call and no promise (every rule holds a
   * lease with room: src/leases), else `undefined`: then `decide`. Absent = never.
   */
  decideNow?(calls: RuleCall[], requestId: string, waitUntil?: WaitUntil): Decision | undefined;
  /**
   * Frees a `concurrency` slot held by `requestId`; with a `reservation`, gives a delayed request's slot
   * back if no later request reserved one behind it. Not bound by the decision budget.
   */
  release(call: RuleCall, requestId: string, reservation?: Reservation): Promise<void>;
  /**
   * Gives back units a decision consumed (`Store.refund`, each call to the endpoint holding its identity):
   * `whenUs` as there (negative: taken at most that many µs ago). Resolves to the units each call got back.
   * Not bound by the decision budget. Absent = units are never given back (a rule counting by status then
   * keeps every request's units: docs/counting.md).
   */
  refund?(calls: RefundCall[], requestId: string, whenUs: number): Promise<number[]>;
  /**
   * Settles allowed calls' costs after their response (one script call per database and direction; docs/settle.md).
   * `decidedAtMs`: `Date.now()` before the decision was sent (a give-back reaches no further back than that).
   * Not bound by the decision budget. Absent = costs are never settled (the reservation stands).
   */
  settle?(settlements: Settlement[], requestId: string, decidedAtMs: number): Promise<SettledUnits[]>;
}
