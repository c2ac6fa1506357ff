/**
 * The Lua scripts' wire contract, defined once: which script serves each call kind (scripts.ts assembles them
 * from `lua/`), and how a call's rules become its KEYS/ARGV (replies and their one decoder are in reply.ts).
 * The limiting logic itself lives only in `lua/` (docs/script.md has the map).
 */
import { traitsOf } from "./algorithms";
import {
  blockKey,
  leaseMarkKey,
  overrideKey,
  RESET_FENCE_MAX_MS,
  refundLedgerKey,
  resetFenceKey,
  stateKey,
} from "./keys";
import type { CalendarBounds } from "../util/calendar";
import type { RedisScript } from "./redis";
import {
  DECIDE,
  DECIDE_WITH_OPTIONS,
  FENCE,
  GIVE_BACK,
  LEASE,
  LIST_WRITE,
  REAIM,
  REFUND,
  SCRIPTS,
  SETTLE,
} from "./scripts";
import type { RefundCall, Reservation, RuleCall, Settlement } from "./types";

export { DECIDE, DECIDE_WITH_OPTIONS, FENCE, GIVE_BACK, LEASE, LIST_WRITE, REAIM, REFUND, SCRIPTS, SETTLE };

/** One script call: the script that serves it, and its KEYS and ARGV (`RedisPort.runScript`'s arguments). */
export interface ScriptCall {
  script: RedisScript;
  keys: string[];
  args: string[];
}

/** Options of one decision call. */
export interface CallOptions {
  /**
   * Test-only: milliseconds added to Redis's clock inside the script (lua/decide-with-options.lua, and a
   * lease call's). Production always sends 0. @default 0
   */
  timeOffsetMs?: number;
  /** Evaluate with the given cost but write nothing (the admin API's view of an identity). @default false */
  peek?: boolean;
  /**
   * Ask for leases (not with `peek`): `units[i]` units wanted for call i, its cost included (≤ cost = none),
   * each living at most `maxMs`.
   */
  lease?: { units: readonly number[]; maxMs: number };
  /**
   * The reply carries what each written token-bucket/GCRA rule wrote (`RuleResult.reservation`), as it does
   * for a delayed request, and when: a split decision's refund gives back only what they prove still owed.
   */
  stamps?: boolean;
}

/** A give-back call: a delayed request's reservation returned (lua/give-back.lua). */
export function giveBackArguments(prefix: string, call: RuleCall, reservation: Reservation): ScriptCall {
  return {
    script: GIVE_BACK,
    keys: [
      stateKey(prefix, call.rule, call.identityHash),
      resetFenceKey(prefix, call.rule, call.identityHash),
    ],
    args: [String(reservation.tatUs), String(reservation.previousTatUs), String(reservation.writtenAtUs)],
  };
}

/**
 * A settle call (lua/settle.lua): each settlement's units charged to its rule's state, priced at the limits in
 * force at its decision (an override's, where one applied). Only charges: units to give back go to a refund.
 */
export function settleArguments(prefix: string, charges: readonly Settlement[]): ScriptCall {
  const keys: string[] = [];
  const args: string[] = [];
  for (const { result, units } of charges) {
    const { call } = result;
    keys.push(stateKey(prefix, call.rule, call.identityHash));
    args.push(
      String(traitsOf(call.algorithm).code),
      String(result.limit),
      String(call.calendar ? 0 : result.periodMs), // a calendar period's end only its bounds say
      String(call.burst),
      String(units),
    );
  }
  return { script: SETTLE, keys, args };
}

/**
 * A re-aim call: the identity's fixed-window counter made to expire at the end of the current window of
 * `periodMs`, the period now in force, its count kept (lua/reaim.lua).
 */
export function reaimArguments(
  prefix: string,
  rule: string,
  identityHash: string,
  periodMs: number,
): ScriptCall {
  return {
    script: REAIM,
    keys: [stateKey(prefix, rule, identityHash)],
    args: [String(Math.trunc(periodMs))],
  };
}

/** A rate: `limit` units per `periodMs`. */
export interface Rate {
  limit: number;
  periodMs: number;
}

/**
 * A re-aim call for a bucket (token-bucket, gcra): the identity's TAT made to owe, at the emission interval of
 * `now`, the rate in force, the units it owed at that of `before` (lua/reaim.lua).
 */
export function bucketReaimArguments(
  prefix: string,
  rule: string,
  identityHash: string,
  now: Rate,
  before: Rate,
): ScriptCall {
  return {
    script: REAIM,
    keys: [stateKey(prefix, rule, identityHash)],
    args: [now.periodMs, now.limit, before.limit, before.periodMs].map((n) => String(Math.trunc(n))),
  };
}

/**
 * A fence call: one identity's reset fence under one rule raised to `fenceMs` (never shorter), and `stateKeys`
 * deleted behind it (an admin reset); for a bucket's state the fence also stands until the TAT it held, or for
 * the longest while its refund ledger exists; `lift`: the identity's block is deleted in the same call
 * (lua/fence.lua).
 */
export function fenceArguments(
  prefix: string,
  rule: string,
  identityHash: string,
  fenceMs: number,
  stateKeys: readonly string[] = [],
  bucket = false,
  lift = false,
): ScriptCall {
  const fence = resetFenceKey(prefix, rule, identityHash);
  const keys = bucket
    ? [fence, refundLedgerKey(prefix, rule, identityHash), ...stateKeys]
    : [fence, ...stateKeys];
  if (lift) keys.push(blockKey(prefix, rule, identityHash));
  return {
    script: FENCE,
    keys,
    args: [String(Math.ceil(fenceMs)), bucket ? "1" : "0", String(RESET_FENCE_MAX_MS), lift ? "1" : "0"],
  };
}

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

/**
 * Whether a decision of `call` reads and may start the identity's block: an enforcing call of a rule with a
 * `block` (a `monitor` rule never blocks, so it does not read one either: docs/protect.md, "Penalty box").
 */
const blocks = (call: RuleCall): call is RuleCall & { blockMs: number } =>
  call.mode === "on" && call.blockMs !== undefined && call.blockMs > 0;

/**
 * Every call's state key then the override keys that are sent, each followed by its call's block key in a
 * decision (`decision`: a refund reads no block), and each call's group of 7 ARGV slots (lua/decide/rules.lua's
 * table): algorithm, mode, limit, period, burst, cost, delay (or a calendar period's bounds); a block rides on the mode slot
 * (`"<mode>:<block ms>"`), so a rule without one sends exactly what it sent before blocks existed.
 */
function ruleGroups(
  prefix: string,
  calls: readonly RuleCall[],
  modeOf: (call: RuleCall, i: number) => string,
  decision = false,
): { keys: string[]; groups: string[] } {
  const keys: string[] = [];
  const extras: string[] = [];
  const groups: string[] = [];
  calls.forEach((call, i) => {
    keys.push(stateKey(prefix, call.rule, call.identityHash));
    if (call.override !== false) extras.push(overrideKey(prefix, call.rule, call.identityHash));
    const block = decision && blocks(call);
    if (block) extras.push(blockKey(prefix, call.rule, call.identityHash));
    groups.push(
      String(traitsOf(call.algorithm).code),
      block ? `${modeOf(call, i)}:${Math.trunc(call.blockMs)}` : modeOf(call, i),
      String(call.limit),
      String(call.periodMs),
      String(call.burst),
      String(call.cost),
      call.calendar ? calendarSlot(call.calendar) : String(call.delayMs ?? 0),
    );
  });
  for (const key of extras) keys.push(key);
  return { keys, groups };
}

/**
 * A calendar period's bounds in its rule's delay slot (a window rule has no delay):
 * `<previous start>:<start>:<end>:<next end>`, ms (lua/decide/calendar.lua).
 */
const calendarSlot = (b: CalendarBounds): string =>
  `${b.previousStartMs}:${b.startMs}:${b.endMs}:${b.nextEndMs}`;

/** A decision's mode slot: on/monitor, with its override key or not. */
function decisionMode(call: RuleCall): string {
  if (call.override === false) return call.mode === "on" ? MODE_CODE.on : MODE_CODE.monitor;
  return call.mode === "on" ? MODE_CODE.onWithOverride : MODE_CODE.monitorWithOverride;
}

/**
 * One decision call; every key the script touches is in `keys` (Upstash key locking). A plain decision
 * (lua/decide.lua) carries no per-call extras: the request id only when a sliding-log or concurrency rule
 * stores it; peek, stamps and the time offset go to lua/decide-with-options.lua, leases to lua/lease.lua.
 * @param splitRefunds a split decision's refund can reach this database (`StoreOptions.splitRefunds`, whose
 *   default this shares): a lease call then carries each rule's lease mark, which a bucket's grant writes
 */
export function scriptArguments(
  prefix: string,
  calls: readonly RuleCall[],
  requestId: string,
  opts: CallOptions = {},
  splitRefunds = true,
): ScriptCall {
  const { keys, groups } = ruleGroups(prefix, calls, decisionMode, true);
  const offsetMs = String(Math.trunc(opts.timeOffsetMs ?? 0));
  if (opts.lease) {
    if (splitRefunds) for (const call of calls) keys.push(leaseMarkKey(prefix, call.rule, call.identityHash));
    const wanted = calls.map((_, i) => String(opts.lease?.units[i] ?? 0));
    const args = [requestId, String(Math.trunc(opts.lease.maxMs)), offsetMs, ...groups, ...wanted];
    return { script: LEASE, keys, args };
  }
  if (opts.peek || offsetMs !== "0" || opts.stamps === true) {
    const what = opts.peek ? "1" : opts.stamps === true ? "2" : "0";
    return { script: DECIDE_WITH_OPTIONS, keys, args: [requestId, what, offsetMs, ...groups] };
  }
  const id = calls.some((call) => traitsOf(call.algorithm).storesRequestId) ? requestId : "";
  return { script: DECIDE, keys, args: [id, ...groups] };
}

/**
 * A refund: give back `call.cost` units of each call, consumed at `whenUs` (µs on Redis's clock; 0 = unknown,
 * "the current window"; negative: at most `-whenUs` µs ago, a split decision undone) under `requestId`
 * (lua/refund.lua). After the override keys, each call's refund ledger and lease mark where a split decision's
 * refund can reach this database (`splitRefunds`; a split decision's own refund always), then its reset fence;
 * a split decision's refund also carries each call's stamp after the rule groups.
 */
export function refundArguments(
  prefix: string,
  calls: readonly RefundCall[],
  requestId: string,
  whenUs: number,
  splitRefunds = true,
): ScriptCall {
  // Each group priced at the limits its units were taken under, and the override's key where they must still
  // be that override's (the mode slot says so).
  const sent = calls.map(({ pricedAt, ...call }) =>
    pricedAt
      ? { ...call, limit: pricedAt.limit, periodMs: pricedAt.periodMs, override: pricedAt.overridden }
      : call,
  );
  const { keys, groups } = ruleGroups(prefix, sent, (call, i) => {
    if (!calls[i]?.pricedAt?.overridden) return decisionMode(call);
    return call.mode === "on" ? MODE_CODE.onPricedAtOverride : MODE_CODE.monitorPricedAtOverride;
  });
  const args = [requestId, String(Math.trunc(whenUs)), ...groups];
  if (whenUs < 0) {
    // Each call's stamp (lua/refund.lua): the TAT its decision wrote, Redis's clock then, the TAT it replaced.
    for (const { pricedAt } of calls) {
      const { tatUs = 0, writtenAtUs = 0, previousTatUs = 0 } = pricedAt?.stamp ?? {};
      args.push(String(tatUs), String(writtenAtUs), String(previousTatUs));
    }
  }
  const kinds = splitRefunds || whenUs < 0 ? [refundLedgerKey, leaseMarkKey, resetFenceKey] : [resetFenceKey];
  for (const key of kinds) {
    for (const call of calls) keys.push(key(prefix, call.rule, call.identityHash));
  }
  return { script: REFUND, keys, args };
}
