/**
 * The Lua script's reply, defined once: its layout and codes, and the one decoder that turns the integer reply
 * into typed results (the calls' KEYS/ARGV are in script.ts; lua/decide/rules.lua's reply table is the contract).
 */
import { traitsOf } from "./algorithms";
import { ruleResult } from "./results";
import type { Outcome, Reservation, RuleCall, RuleResult } from "./types";

/** Outcome codes of the reply. */
export const OUTCOME: Readonly<Record<number, Outcome>> = {
  0: "denied",
  1: "allowed",
  2: "cost-exceeds-capacity",
  // 3 "delayed" is decoded as "allowed" with a `delayMs` (see decodeReply).
};

/** The outcome code of an allowed request that waits for a reserved slot (a rule with a `delay`). */
const DELAYED = 3;

/** Outcome codes of a rule with a `block`: denied by its standing block, or denied and a block started now. */
const BLOCK: Readonly<Record<number, RuleResult["blocked"]>> = { 4: "standing", 5: "started" };

/** Reply layout: one head element, then a fixed-size group per rule, then the appendices the head names. */
export const REPLY = {
  /** Index of the head element: bit 1 set if the request as a whole is allowed, then the flags below. */
  allowed: 0,
  /** Head flag: the stamps follow the groups (and a lease call's words). */
  stamped: 2,
  /** Head flag: the periods in force follow, last. */
  periods: 4,
  /** Elements per rule after the head. */
  fieldsPerRule: 5,
  /** Offsets inside one rule's group. */
  outcome: 0,
  limit: 1,
  remaining: 2,
  resetAfterMs: 3,
  retryAfterMs: 4,
  /**
   * Stamps per rule after the groups, when some rule was delayed or the call asked for them: the TAT
   * written, the TAT replaced, Redis's clock when it wrote.
   */
  stampsPerRule: 3,
} as const;

/** The refund's reply: the units each call actually got back, in call order. */
export function decodeRefund(raw: unknown, calls: readonly RuleCall[]): number[] {
  if (!Array.isArray(raw) || raw.length !== calls.length) {
    throw new ReplyShapeError(
      `expected ${calls.length} refunded counts, got ${Array.isArray(raw) ? raw.length : typeof raw}`,
    );
  }
  return raw.map((value, i) => {
    const n = Number(value);
    if (!Number.isFinite(n)) throw new ReplyShapeError(`element ${i} is not a number`);
    return n;
  });
}

/** The reply's "end of the current window" marker (see {@link orWindowEnd}). */
const WINDOW_END = -1;

/** Thrown when a reply does not have the script's shape (a different script under the same SHA?). */
export class ReplyShapeError extends Error {
  constructor(detail: string) {
    super(`unexpected reply from the Floodgate script: ${detail}`);
    this.name = "ReplyShapeError";
  }
}

/** A LEASE call's reply words per rule, after the groups: units, life ms, the TAT written (µs), period ms. */
const LEASE_WORDS_PER_RULE = 4;

/**
 * The one decoder: a decision script's raw integer reply → whether the request is allowed, and one result per
 * call. Besides the full reply (`REPLY`), a plain decision's short reply for one rule allowed on a fast path.
 * @param leased the call was a lease call (lua/lease.lua): its words follow the groups
 */
export function decodeReply(
  raw: unknown,
  calls: readonly RuleCall[],
  leased = false,
): { allowed: boolean; results: RuleResult[] } {
  const only = calls.length === 1 ? calls[0] : undefined;
  if (only && (typeof raw === "number" || (Array.isArray(raw) && raw.length === SHORT_REPLY_LENGTH))) {
    return { allowed: true, results: [shortReply(raw, only)] };
  }
  const expected = 1 + calls.length * REPLY.fieldsPerRule;
  // After the groups, in this order: a lease call's { units, life_ms, tat_us, period_ms } per rule and Redis's
  // now (4n + 1 words); the stamps (3n) when the head says so; the periods in force (n), negative where an
  // override applied, when the head says so (lua/decide/rules.lua's reply table).
  const head = Array.isArray(raw) ? Number(raw[REPLY.allowed]) : Number.NaN;
  const leaseWords = leased ? LEASE_WORDS_PER_RULE * calls.length + 1 : 0;
  const hasStamps = (head & REPLY.stamped) !== 0;
  const stampWords = hasStamps ? calls.length * REPLY.stampsPerRule : 0;
  const periodWords = (head & REPLY.periods) !== 0 ? calls.length : 0;
  if (
    !Array.isArray(raw) ||
    !Number.isInteger(head) ||
    raw.length !== expected + leaseWords + stampWords + periodWords
  ) {
    throw new ReplyShapeError(
      `expected ${expected + leaseWords + stampWords + periodWords} integers, got ${Array.isArray(raw) ? raw.length : typeof raw}`,
    );
  }
  const stampsAt = expected + leaseWords;
  const periodsAt = periodWords > 0 ? stampsAt + stampWords : 0;
  const at = (i: number): number => {
    const value = Number(raw[i]);
    if (!Number.isFinite(value)) throw new ReplyShapeError(`element ${i} is not a number`);
    return value;
  };
  const now = Date.now();
  const results = calls.map((call, r): RuleResult => {
    const base = 1 + r * REPLY.fieldsPerRule;
    const code = at(base + REPLY.outcome);
    const stampAt = hasStamps ? stampsAt + r * REPLY.stampsPerRule : 0;
    // The period in force, negative where an override applied: the call's own when none applied to any rule.
    const period = periodsAt > 0 ? at(periodsAt + r) : call.periodMs;
    const terms = { periodMs: Math.abs(period), overridden: period < 0 };
    const reservation = stampAt > 0 ? reservationAt(at, stampAt) : undefined;
    if (code === DELAYED) return delayedResult(call, at, base, reservation, terms);
    const blocked = BLOCK[code];
    const outcome = blocked ? "denied" : OUTCOME[code];
    if (!outcome) throw new ReplyShapeError(`unknown outcome ${raw[base + REPLY.outcome]}`);
    const leaseAt = expected + LEASE_WORDS_PER_RULE * r;
    const units = leased ? at(leaseAt) : 0;
    const lease =
      units > 0
        ? {
            units,
            lifeMs: at(leaseAt + 1),
            tatUs: at(leaseAt + 2),
            periodMs: at(leaseAt + 3),
            whenUs: at(expected + LEASE_WORDS_PER_RULE * calls.length),
          }
        : undefined;
    return ruleResult({
      call,
      outcome,
      limit: at(base + REPLY.limit),
      ...terms,
      remaining: Math.max(0, at(base + REPLY.remaining)),
      resetAfterMs: orWindowEnd(at(base + REPLY.resetAfterMs), call, now),
      retryAfterMs: orWindowEnd(at(base + REPLY.retryAfterMs), call, now),
      source: "redis",
      lease,
      // What this call wrote to a bucket: a split decision's refund reads it, and a rule with a delay's
      // give-back (src/engine/store.ts `release`).
      reservation: reservation && reservation.tatUs > 0 ? reservation : undefined,
      blocked,
    });
  });
  return { allowed: (head & 1) === 1, results };
}

/** The terms a rule was decided under: the period in force, and whether an override of the identity set them. */
interface Terms {
  periodMs: number;
  overridden: boolean;
}

/**
 * A delayed rule: allowed, after a wait of `retry_after_ms` (which is also when more quota is available);
 * `reservation` its give-back stamps (none: the call wrote nothing).
 */
function delayedResult(
  call: RuleCall,
  at: (i: number) => number,
  base: number,
  reservation: Reservation | undefined,
  terms: Terms,
): RuleResult {
  const waitMs = at(base + REPLY.retryAfterMs);
  return ruleResult({
    call,
    outcome: "allowed",
    limit: at(base + REPLY.limit),
    ...terms,
    remaining: 0,
    resetAfterMs: at(base + REPLY.resetAfterMs),
    retryAfterMs: waitMs,
    source: "redis",
    delayMs: waitMs,
    reservation,
  });
}

/** The stamps at `stampAt`: the TAT a bucket rule wrote, the one it replaced, and when it wrote. */
const reservationAt = (at: (i: number) => number, stampAt: number): Reservation => ({
  tatUs: at(stampAt),
  previousTatUs: at(stampAt + 1),
  writtenAtUs: at(stampAt + 2),
});

/** Length of the short array reply: one rule allowed on a fast path (lua/decide.lua's reply table). */
const SHORT_REPLY_LENGTH = 3;

/**
 * A short reply (one rule allowed on one of the script's fast paths): the remaining units alone (a fixed
 * window on a live counter), or `{ remaining, reset_after_ms, retry_after_ms }`. No override was read, so the
 * limit and period in force are the call's own.
 */
function shortReply(raw: unknown, call: RuleCall): RuleResult {
  const at = (value: unknown, i: number): number => {
    const n = Number(value);
    if (!Number.isFinite(n)) throw new ReplyShapeError(`element ${i} is not a number`);
    return n;
  };
  const [remaining, resetAfterMs, retryAfterMs] = Array.isArray(raw)
    ? raw.map(at)
    : [at(raw, 0), WINDOW_END, WINDOW_END];
  if (!Array.isArray(raw) && !traitsOf(call.algorithm).integerReply) {
    throw new ReplyShapeError(`an integer reply for a ${call.algorithm} rule`);
  }
  const now = Date.now();
  return ruleResult({
    call,
    outcome: "allowed",
    limit: call.limit,
    remaining: Math.max(0, remaining ?? 0),
    resetAfterMs: orWindowEnd(resetAfterMs ?? 0, call, now),
    retryAfterMs: orWindowEnd(retryAfterMs ?? 0, call, now),
    source: "redis",
  });
}

/**
 * A time of the reply, ms; -1 is the script's "end of the current window" for a fixed-window rule it
 * allowed without reading the clock (its counter being live proves the window; a call that reads an override
 * always reads it, so the window here is the call's own): the epoch-aligned window end, worked out here.
 * Whether to count was decided on Redis's clock; only this hint uses the edge's.
 */
function orWindowEnd(ms: number, call: RuleCall, now: number): number {
  if (ms >= 0) return ms;
  if (ms === WINDOW_END && traitsOf(call.algorithm).integerReply)
    return call.periodMs - (now % call.periodMs);
  return 0;
}
