/**
 * The Lua script's wire contract, defined once: its source and SHA-1, and how a decision's rules become
 * KEYS/ARGV (its reply's layout and the one decoder are in reply.ts). The limiting logic itself lives only in
 * `lua/floodgate.lua`.
 */
import source from "../../lua/floodgate.lua";
import { traitsOf } from "./algorithms";
import {
  leaseMarkKey,
  overrideKey,
  RESET_FENCE_MAX_MS,
  refundLedgerKey,
  resetFenceKey,
  stateKey,
} from "./keys";
import type { RedisScript } from "./redis";
import type { RefundCall, Reservation, RuleCall } from "./types";

/** The script text exactly as sent with `EVAL` (Upstash's `allow-key-locking` shebang included). */
export const SCRIPT_SOURCE: string = source;

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

/** The script as the Redis port runs it (src/engine/redis.ts): every call kind below goes through it. */
export const FLOODGATE_SCRIPT: RedisScript = { name: "floodgate", source: SCRIPT_SOURCE, sha: scriptSha };

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
  /**
   * The reply carries what each written token-bucket/GCRA rule wrote (`RuleResult.reservation`), as it does
   * for a delayed request, and when: a split decision's refund gives back only what they prove still owed.
   */
  stamps?: boolean;
}

/** ARGV[1]: which per-call slots follow (lua/floodgate.lua's header). */
const CALL = {
  plain: "0",
  withRequestId: "1",
  withOptions: "2",
  refund: "3",
  lease: "4",
  giveBack: "5",
  reaim: "6",
  fence: "7",
} as const;

/** KEYS and ARGV of a give-back call: a delayed request's reservation returned (lua/floodgate.lua). */
export function giveBackArguments(
  prefix: string,
  call: RuleCall,
  reservation: Reservation,
): { keys: string[]; args: string[] } {
  return {
    keys: [
      stateKey(prefix, call.rule, call.identityHash),
      resetFenceKey(prefix, call.rule, call.identityHash),
    ],
    args: [
      CALL.giveBack,
      String(reservation.tatUs),
      String(reservation.previousTatUs),
      String(reservation.writtenAtUs),
    ],
  };
}

/**
 * KEYS and ARGV of a re-aim call: the identity's fixed-window counter made to expire at the end of the current
 * window of `periodMs`, the period now in force, its count kept (lua/floodgate.lua's header, call "6").
 */
export function reaimArguments(
  prefix: string,
  rule: string,
  identityHash: string,
  periodMs: number,
): { keys: string[]; args: string[] } {
  return { keys: [stateKey(prefix, rule, identityHash)], args: [CALL.reaim, String(Math.trunc(periodMs))] };
}

/**
 * KEYS and ARGV of a fence call: one identity's reset fence under one rule raised to `fenceMs` (never shorter),
 * and `stateKeys` deleted behind it (an admin reset); for a bucket's state the fence also stands until the TAT
 * it held, or for the longest while its refund ledger exists (lua/floodgate.lua's header, call "7").
 */
export function fenceArguments(
  prefix: string,
  rule: string,
  identityHash: string,
  fenceMs: number,
  stateKeys: readonly string[] = [],
  bucket = false,
): { keys: string[]; args: string[] } {
  const fence = resetFenceKey(prefix, rule, identityHash);
  return {
    keys: bucket ? [fence, refundLedgerKey(prefix, rule, identityHash), ...stateKeys] : [fence, ...stateKeys],
    args: [CALL.fence, String(Math.ceil(fenceMs)), bucket ? "1" : "0", String(RESET_FENCE_MAX_MS)],
  };
}

/** ARGV slots per rule (algorithm, mode, limit, period, burst, cost, delay: lua/floodgate.lua's `PER_RULE`). */
const ARGS_PER_RULE = 7;

/**
 * The mode slot: on/monitor, and whether the rule's override key follows the state keys; in a refund only,
 * also whether the units were priced at that override (`RefundCall.pricedAt`).
 */
const MODE_CODE = {
  on: "1",
  monitor: "0",
  onWithOverride: "3",
  monitorWithOverride: "2",
  onPricedAtOverride: "5",
  monitorPricedAtOverride: "4",
} as const;

/** Where the mode slot lies among a rule's ARGV slots (lua/floodgate.lua's `MODE`). */
const MODE_SLOT = 1;

/**
 * KEYS and ARGV of one script call; every key the script touches is in `keys` (Upstash key locking).
 * A plain decision carries no per-call extras: the request id only when a sliding-log or concurrency rule
 * stores it, peek and the time offset only when asked for, an override key only for a call that has one.
 * @param splitRefunds a split decision's refund can reach this database (`StoreOptions.splitRefunds`, whose
 *   default this shares): a lease call then carries each rule's lease mark, which a bucket's grant writes
 */
export function scriptArguments(
  prefix: string,
  calls: readonly RuleCall[],
  requestId: string,
  opts: CallOptions = {},
  splitRefunds = true,
): { keys: string[]; args: string[] } {
  const keys: string[] = [];
  const overrides: string[] = [];
  const args: string[] = [CALL.plain];
  const offsetMs = Math.trunc(opts.timeOffsetMs ?? 0);
  const stamped = opts.stamps === true;
  if (opts.lease) {
    args[0] = CALL.lease;
    args.push(requestId, String(Math.trunc(opts.lease.maxMs)));
  } else if (opts.peek || offsetMs !== 0 || stamped) {
    args[0] = CALL.withOptions;
    args.push(requestId, opts.peek ? "1" : stamped ? "2" : "0", String(offsetMs));
  } else if (calls.some((call) => traitsOf(call.algorithm).storesRequestId)) {
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
      String(traitsOf(call.algorithm).code),
      mode,
      String(call.limit),
      String(call.periodMs),
      String(call.burst),
      String(call.cost),
      String(call.delayMs ?? 0),
    );
  }
  for (const key of overrides) keys.push(key);
  if (opts.lease) {
    if (splitRefunds) for (const call of calls) keys.push(leaseMarkKey(prefix, call.rule, call.identityHash));
    for (let i = 0; i < calls.length; i++) args.push(String(opts.lease.units[i] ?? 0));
  }
  return { keys, args };
}

/**
 * KEYS and ARGV of a refund: give back `call.cost` units of each call, consumed at `whenUs` (µs on Redis's
 * clock; 0 = unknown, "the current window"; negative: at most `-whenUs` µs ago, a split decision undone) under
 * `requestId` (lua/floodgate.lua's header, call "3"). After the override keys, each call's refund ledger and
 * lease mark where a split decision's refund can reach this database (`splitRefunds`; a split decision's own
 * refund always), then its reset fence; a split decision's refund also carries each call's stamp after the
 * rule groups.
 */
export function refundArguments(
  prefix: string,
  calls: readonly RefundCall[],
  requestId: string,
  whenUs: number,
  splitRefunds = true,
): { keys: string[]; args: string[] } {
  // A plain decision's groups, reused: in each the limits its units were priced at, and the override's key
  // where they must still be that override's (the mode slot says so).
  const sent = calls.map(({ pricedAt, ...call }) =>
    pricedAt
      ? { ...call, limit: pricedAt.limit, periodMs: pricedAt.periodMs, override: pricedAt.overridden }
      : call,
  );
  const { keys, args } = scriptArguments(prefix, sent, requestId);
  const rules = args.slice(args.length - calls.length * ARGS_PER_RULE);
  calls.forEach(({ mode, pricedAt }, i) => {
    if (pricedAt?.overridden) {
      rules[i * ARGS_PER_RULE + MODE_SLOT] =
        mode === "on" ? MODE_CODE.onPricedAtOverride : MODE_CODE.monitorPricedAtOverride;
    }
  });
  if (whenUs < 0) {
    // Each call's stamp, lua/floodgate.lua's STAMP_TAT, STAMP_AT and STAMP_REPLACED ("0": none).
    for (const { pricedAt } of calls) {
      const { tatUs = 0, writtenAtUs = 0, previousTatUs = 0 } = pricedAt?.stamp ?? {};
      rules.push(String(tatUs), String(writtenAtUs), String(previousTatUs));
    }
  }
  const kinds = splitRefunds || whenUs < 0 ? [refundLedgerKey, leaseMarkKey, resetFenceKey] : [resetFenceKey];
  for (const key of kinds) {
    for (const call of calls) keys.push(key(prefix, call.rule, call.identityHash));
  }
  return { keys, args: [CALL.refund, requestId, String(Math.trunc(whenUs)), ...rules] };
}
