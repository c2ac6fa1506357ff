/**
 * The Lua script's wire contract, defined once: its source and SHA-1, how a decision's rules become
 * KEYS/ARGV, and the one decoder that turns its integer reply into typed results.
 * The limiting logic itself lives only in `lua/floodgate.lua`.
 */
import source from "../../lua/floodgate.lua";
import { overrideKey, resetFenceKey, stateKey } from "./keys";
import {
  type Algorithm,
  type Outcome,
  type Reservation,
  type RuleCall,
  type RuleResult,
  ruleResult,
} from "./types";

/** The script text exactly as sent with `EVAL` (Upstash's `allow-key-locking` shebang included). */
export const SCRIPT_SOURCE: string = source;

/** Algorithm codes as the script reads them (ARGV per rule, position 1). */
export const ALGORITHM_CODE: Readonly<Record<Algorithm, number>> = {
  "fixed-window": 1,
  "sliding-window": 2,
  "sliding-log": 3,
  "token-bucket": 4,
  gcra: 5,
  concurrency: 6,
  shed: 7,
};

/** Outcome codes of the reply. */
export const OUTCOME: Readonly<Record<number, Outcome>> = {
  0: "denied",
  1: "allowed",
  2: "cost-exceeds-capacity",
  // 3 "delayed" is decoded as "allowed" with a `delayMs` (see decodeReply).
};

/** The outcome code of an allowed request that waits for a reserved slot (a rule with a `delay`). */
const DELAYED = 3;

/** Reply layout: one head element, then a fixed-size group per rule. */
export const REPLY = {
  /** Index of the head element: 1 if the request as a whole is allowed. */
  allowed: 0,
  /** Elements per rule after the head. */
  fieldsPerRule: 5,
  /** Offsets inside one rule's group. */
  outcome: 0,
  limit: 1,
  remaining: 2,
  resetAfterMs: 3,
  retryAfterMs: 4,
  /** Stamps per rule after the groups, when some rule was delayed: the TAT written, the TAT replaced. */
  stampsPerRule: 2,
} as const;

let shaPromise: Promise<string> | undefined;

/**
 * SHA-1 (hex) of {@link SCRIPT_SOURCE}, what `EVALSHA` names. Computed once per isolate, lazily: Workers
 * forbid crypto work in global scope, and most isolates never need it before the first request.
 */
export function scriptSha(): Promise<string> {
  shaPromise ??= crypto.subtle.digest("SHA-1", new TextEncoder().encode(SCRIPT_SOURCE)).then((digest) => {
    let hex = "";
    for (const byte of new Uint8Array(digest)) hex += byte.toString(16).padStart(2, "0");
    return hex;
  });
  return shaPromise;
}

/** Options of one script call. */
export interface CallOptions {
  /** Test-only: milliseconds added to Redis's clock inside the script. Production always sends 0. @default 0 */
  timeOffsetMs?: number;
  /** Evaluate with the given cost but write nothing (the admin API's view of an identity). @default false */
  peek?: boolean;
  /**
   * Ask for leases (not with `peek` or `timeOffsetMs`): `units[i]` units wanted for call i, its cost
   * included (≤ cost = none), each living at most `maxMs`.
   */
  lease?: { units: readonly number[]; maxMs: number };
}

/** Algorithms whose state stores the request id (ARGV[2]): their slots are released by it. */
export const HOLDS_REQUEST_ID: ReadonlySet<Algorithm> = new Set(["sliding-log", "concurrency", "shed"]);

/** ARGV[1]: which per-call slots follow (lua/floodgate.lua's header). */
const CALL = {
  plain: "0",
  withRequestId: "1",
  withOptions: "2",
  refund: "3",
  lease: "4",
  giveBack: "5",
} as const;

/** KEYS and ARGV of a give-back call: a delayed request's reservation returned (lua/floodgate.lua). */
export function giveBackArguments(
  prefix: string,
  call: RuleCall,
  reservation: Reservation,
): { keys: string[]; args: string[] } {
  return {
    keys: [stateKey(prefix, call.rule, call.identityHash)],
    args: [CALL.giveBack, String(reservation.tatUs), String(reservation.previousTatUs)],
  };
}

/** ARGV slots per rule (algorithm, mode, limit, period, burst, cost, delay: lua/floodgate.lua's `PER_RULE`). */
const ARGS_PER_RULE = 7;

/** The mode slot: on/monitor, and whether the rule's override key follows the state keys. */
const MODE_CODE = { on: "1", monitor: "0", onWithOverride: "3", monitorWithOverride: "2" } as const;

/**
 * KEYS and ARGV of one script call; every key the script touches is in `keys` (Upstash key locking).
 * A plain decision carries no per-call extras: the request id only when a sliding-log or concurrency rule
 * stores it, peek and the time offset only when asked for, an override key only for a call that has one.
 */
export function scriptArguments(
  prefix: string,
  calls: readonly RuleCall[],
  requestId: string,
  opts: CallOptions = {},
): { keys: string[]; args: string[] } {
  const keys: string[] = [];
  const overrides: string[] = [];
  const args: string[] = [CALL.plain];
  const offsetMs = Math.trunc(opts.timeOffsetMs ?? 0);
  if (opts.lease) {
    args[0] = CALL.lease;
    args.push(requestId, String(Math.trunc(opts.lease.maxMs)));
  } else if (opts.peek || offsetMs !== 0) {
    args[0] = CALL.withOptions;
    args.push(requestId, opts.peek ? "1" : "0", String(offsetMs));
  } else if (calls.some((call) => HOLDS_REQUEST_ID.has(call.algorithm))) {
    args[0] = CALL.withRequestId;
    args.push(requestId);
  }
  for (const call of calls) {
    keys.push(stateKey(prefix, call.rule, call.identityHash));
    let mode: string = call.mode === "on" ? MODE_CODE.on : MODE_CODE.monitor;
    if (call.override !== false) {
      overrides.push(overrideKey(prefix, call.rule, call.identityHash));
      mode = call.mode === "on" ? MODE_CODE.onWithOverride : MODE_CODE.monitorWithOverride;
    }
    args.push(
      String(ALGORITHM_CODE[call.algorithm]),
      mode,
      String(call.limit),
      String(call.periodMs),
      String(call.burst),
      String(call.cost),
      String(call.delayMs ?? 0),
    );
  }
  for (const key of overrides) keys.push(key);
  if (opts.lease) for (let i = 0; i < calls.length; i++) args.push(String(opts.lease.units[i] ?? 0));
  return { keys, args };
}

/**
 * KEYS and ARGV of a refund: give back `call.cost` units of each call, consumed at `whenUs` (µs on Redis's
 * clock; 0 = unknown, "the current window") under `requestId` (lua/floodgate.lua's header, call "3").
 */
export function refundArguments(
  prefix: string,
  calls: readonly RuleCall[],
  requestId: string,
  whenUs: number,
): { keys: string[]; args: string[] } {
  const { keys, args } = scriptArguments(prefix, calls, requestId); // a plain decision's groups, reused
  const rules = args.slice(args.length - calls.length * ARGS_PER_RULE);
  for (const call of calls) keys.push(resetFenceKey(prefix, call.rule, call.identityHash));
  return { keys, args: [CALL.refund, requestId, String(Math.trunc(whenUs)), ...rules] };
}

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
 * The one decoder: the script's raw integer reply → whether the request is allowed, and one result per call.
 * Besides the full reply (`REPLY`), the script's short reply for one fixed-window rule: the remaining units.
 */
export function decodeReply(
  raw: unknown,
  calls: readonly RuleCall[],
): { allowed: boolean; results: RuleResult[] } {
  const only = calls.length === 1 ? calls[0] : undefined;
  if (only && (typeof raw === "number" || (Array.isArray(raw) && raw.length === SHORT_REPLY_LENGTH))) {
    return { allowed: true, results: [shortReply(raw, only)] };
  }
  const expected = 1 + calls.length * REPLY.fieldsPerRule;
  // After the groups, in this order, either or both: a LEASE call's { units, life_ms, tat_us, period_ms } per rule and
  // Redis's now; a delayed request's give-back stamps, 2 per rule (lua/floodgate.lua's header).
  const leaseWords = LEASE_WORDS_PER_RULE * calls.length + 1;
  const stampWords = calls.length * REPLY.stampsPerRule;
  const extra = Array.isArray(raw) ? raw.length - expected : -1;
  const leased = extra === leaseWords || extra === leaseWords + stampWords;
  const stamped = extra === stampWords || extra === leaseWords + stampWords;
  if (!Array.isArray(raw) || (extra !== 0 && !leased && !stamped)) {
    throw new ReplyShapeError(
      `expected ${expected} integers, got ${Array.isArray(raw) ? raw.length : typeof raw}`,
    );
  }
  const at = (i: number): number => {
    const value = Number(raw[i]);
    if (!Number.isFinite(value)) throw new ReplyShapeError(`element ${i} is not a number`);
    return value;
  };
  const now = Date.now();
  const results = calls.map((call, r): RuleResult => {
    const base = 1 + r * REPLY.fieldsPerRule;
    const code = at(base + REPLY.outcome);
    const stampAt = stamped ? expected + (leased ? leaseWords : 0) + r * REPLY.stampsPerRule : 0;
    if (code === DELAYED) return delayedResult(call, at, base, stampAt);
    const outcome = OUTCOME[code];
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
      remaining: Math.max(0, at(base + REPLY.remaining)),
      resetAfterMs: orWindowEnd(at(base + REPLY.resetAfterMs), call, now),
      retryAfterMs: orWindowEnd(at(base + REPLY.retryAfterMs), call, now),
      source: "redis",
      lease,
      // Another bucket rule written beside a delayed one: its unit goes back too if the request never leaves.
      reservation: stampAt > 0 && at(stampAt) > 0 ? reservationAt(at, stampAt) : undefined,
    });
  });
  return { allowed: at(REPLY.allowed) === 1, results };
}

/**
 * A delayed rule: allowed, after a wait of `retry_after_ms` (which is also when more quota is available);
 * `stampAt` is where its give-back stamps are (0: none, the call wrote nothing).
 */
function delayedResult(call: RuleCall, at: (i: number) => number, base: number, stampAt: number): RuleResult {
  const waitMs = at(base + REPLY.retryAfterMs);
  return ruleResult({
    call,
    outcome: "allowed",
    limit: at(base + REPLY.limit),
    remaining: 0,
    resetAfterMs: at(base + REPLY.resetAfterMs),
    retryAfterMs: waitMs,
    source: "redis",
    delayMs: waitMs,
    reservation: stampAt > 0 ? reservationAt(at, stampAt) : undefined,
  });
}

/** The give-back stamps at `stampAt`: the TAT a bucket rule wrote and the one it replaced. */
const reservationAt = (at: (i: number) => number, stampAt: number): Reservation => ({
  tatUs: at(stampAt),
  previousTatUs: at(stampAt + 1),
});

/** Length of the short array reply: one rule allowed on a fast path (lua/floodgate.lua's header). */
const SHORT_REPLY_LENGTH = 3;

/**
 * A short reply (one rule allowed on one of the script's fast paths): the remaining units alone (a fixed
 * window on a live counter), or `{ remaining, reset_after_ms, retry_after_ms }`. No override was read, so the
 * limit in force is the call's own.
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
  if (!Array.isArray(raw) && call.algorithm !== "fixed-window") {
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
 * allowed without reading the clock (its counter being live proves the window): the epoch-aligned window
 * end, worked out here. Whether to count was decided on Redis's clock; only this hint uses the edge's.
 */
function orWindowEnd(ms: number, call: RuleCall, now: number): number {
  if (ms >= 0) return ms;
  if (ms === WINDOW_END && call.algorithm === "fixed-window") return call.periodMs - (now % call.periodMs);
  return 0;
}
