/**
 * What one isolate knows of one (rule, identity) for the fallback limiter (src/resilience/fallback.ts): what
 * Redis last said is left, what the isolate admitted on its own, the calls whose answer it never heard, and
 * the slots it holds. Plain values only.
 */
import { traitsOf } from "../engine/algorithms";
import type { RuleCall } from "../engine/types";

/** A call sent to Redis for one rule: its units may be counted there until its answer is heard. */
export interface Sent {
  /** When it was sent, ms. */
  readonly atMs: number;
  /** Its place in the isolate's sending order: Redis answers one connection's calls in that order. */
  readonly seq: number;
  /** Its units not yet accounted for otherwise (an admission here stands for some of them: `takeBack`). */
  units: number;
}

/** What Redis last said about the identity. */
export interface Heard {
  /** Units (slots) left after that answer, the ones leased to this isolate not included. */
  left: number;
  /** The limit in force then (an override's, if one applied). */
  limit: number;
  /** When it was heard, ms. */
  atMs: number;
  /** When the identity is whole again by that answer (a slot rule: when every slot's lease has run out), ms. */
  wholeAtMs: number;
}

export interface Ledger {
  /** Redis's last answer; `undefined` when it never answered here, or the identity is whole again since. */
  heard: Heard | undefined;
  /** End of the local window used while nothing is heard (aligned to the period), ms. */
  windowEndMs: number;
  /** Units admitted here on the fallback's own word (Redis never counted them), since `usedSinceMs`. */
  used: number;
  usedSinceMs: number;
  /** Calls sent and never answered, oldest first: Redis may have counted them. */
  unheard: Sent[];
  /** Slot rules: the requests admitted here and still in flight (made on the first). */
  held: Set<string> | undefined;
}

/** Most unanswered calls kept apart; older ones are merged (their units kept, dated by the later one). */
const MAX_UNHEARD = 16;

/** `ledger` (a fresh one when `undefined`) brought to `now`: what is over by then forgotten. */
export function ledgerAt(ledger: Ledger | undefined, call: RuleCall, now: number): Ledger {
  const periodMs = Math.max(1, call.periodMs);
  const out = ledger ?? {
    heard: undefined,
    windowEndMs: 0,
    used: 0,
    usedSinceMs: now,
    unheard: [],
    held: undefined,
  };
  if (out.heard !== undefined && now >= out.heard.wholeAtMs) {
    // Whole again: what was admitted here before counts no more either.
    out.heard = undefined;
    out.used = 0;
  }
  if (out.heard === undefined && now >= out.windowEndMs) {
    out.windowEndMs = now - (now % periodMs) + periodMs;
    if (!traitsOf(call.algorithm).holdsSlot) out.used = 0;
  }
  // A period after the first unit admitted here, everything admitted with it has left any window.
  if (out.used > 0 && now - out.usedSinceMs >= periodMs) out.used = 0;
  // A call a period old counts in no window any more (a slot call: its slot's lease ran out).
  if (out.unheard.length > 0 && now - (out.unheard[0] as Sent).atMs >= periodMs) {
    out.unheard = out.unheard.filter((s) => now - s.atMs < periodMs);
  }
  while (out.unheard.length > MAX_UNHEARD) {
    const [a, b, ...rest] = out.unheard as [Sent, Sent, ...Sent[]];
    out.unheard = [{ atMs: b.atMs, seq: b.seq, units: a.units + b.units }, ...rest];
  }
  return out;
}

/**
 * What `ledger` lets this isolate admit of `call` now: Redis's last figure (a bucket's refilled since; the
 * whole limit when nothing is heard), at most `share`, less what was admitted here and the units of calls
 * never answered. With the request's own call (`own`), only the calls sent before it: Redis took those first,
 * and admitting the request stands for what Redis counted of its own. A slot rule: slots, less the requests in
 * flight here.
 */
export function allowanceOf(
  ledger: Ledger,
  call: RuleCall,
  now: number,
  share: number,
  own: Sent | undefined,
): number {
  const { heard } = ledger;
  let base = heard === undefined ? call.limit : heard.left;
  if (heard !== undefined && traitsOf(call.algorithm).shape === "bucket") {
    // A bucket refills evenly: one unit per period / limit.
    base = Math.min(heard.limit, base + Math.floor((heard.limit * (now - heard.atMs)) / call.periodMs));
  }
  let unheard = 0;
  for (const sent of ledger.unheard) {
    if (own === undefined || sent.seq < own.seq) unheard += sent.units;
  }
  const mine = traitsOf(call.algorithm).holdsSlot ? (ledger.held?.size ?? 0) : ledger.used;
  return Math.min(base, share) - unheard - mine;
}

/**
 * The call of a request the fallback admitted (`cost` units): those units count as admitted here, not twice; a
 * lease's other units stay unheard.
 */
export function takeBack(ledger: Ledger, sent: Sent | undefined, cost: number): void {
  if (sent === undefined) return;
  sent.units -= cost;
  if (sent.units <= 0) ledger.unheard = ledger.unheard.filter((s) => s !== sent);
}
