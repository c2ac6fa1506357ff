/**
 * Local fallback limiter: bounds fail-open traffic while Redis cannot answer (docs/fail-open.md: the bound).
 *
 * APPROXIMATE, and the one place limiting logic exists outside `lua/` (it must work when Redis cannot
 * answer), counted in this isolate only. What it allows one (rule, identity) starts from what Redis last said
 * about it here (src/resilience/ledger.ts): its `remaining` (0 after a denial), back to the whole limit once
 * Redis said the identity would be whole again; an identity Redis never answered about here starts from the
 * limit, in a fixed window aligned to the period. From that it takes away what this isolate admitted on its
 * own and the units of calls whose answer it never heard (Redis may have counted them).
 *
 * While Redis is alive but slow (the failure is a timeout, or the breaker opened on timeouts), Redis still
 * admits other requests of the same identity, here and in other isolates: then no isolate takes more than a
 * share (`FALLBACK_SHARE` of the limit) on its own. With N isolates serving a client, fail-open admits at most
 * N × that share beyond the limit while Redis is slow, and N × what Redis last left (the limit, for an identity
 * it never answered about) while Redis is down. Concurrency and shed rules count the requests admitted here
 * still in flight (`release`). Overrides are seen only through the figures Redis gave.
 * Memory is bounded: at most `maxEntries` identities, the least recently used dropped first.
 */
import type { RuleResultInput } from "../engine/results";
import { traitsOf } from "../engine/algorithms";
import { capacityOf, type RuleCall, type RuleResult } from "../engine/types";
import { BoundedMap } from "../util/bounded-map";
import { allowanceOf, type Ledger, ledgerAt, type Sent, takeBack } from "./ledger";

/** Most (rule, identity) pairs kept. @default 10000 */
export const DEFAULT_FALLBACK_ENTRIES = 10_000;

/**
 * The part of an identity's limit one isolate admits on its own while Redis is slow (rounded up: at least one
 * unit). Two isolates then admit at most 1.2 × the limit of a burst Redis itself let through to the limit.
 */
export const FALLBACK_SHARE = 0.1;

/** Calls sent to Redis for one decision, to settle once its outcome is known (`heard` or `lost`). */
export type SentCalls = readonly (Sent | undefined)[];

/** The fallback limiter. Plain values only, safe to keep for the isolate's lifetime. */
export class FallbackLimiter {
  private readonly ledgers: BoundedMap<string, Ledger>;
  /** Calls recorded so far (`Sent.seq`). */
  private sentCount = 0;

  constructor(
    maxEntries: number = DEFAULT_FALLBACK_ENTRIES,
    private readonly now: () => number = Date.now,
  ) {
    this.ledgers = new BoundedMap(maxEntries);
  }

  /** Identities held right now. */
  get size(): number {
    return this.ledgers.size;
  }

  /**
   * Records calls about to be sent to Redis (`units[i]`: what call i asks for, a lease's units included): until
   * an answer is heard, Redis may count them. Settle them with `heard`, or `lost` when they certainly were not.
   */
  sent(calls: readonly RuleCall[], units?: readonly number[]): SentCalls {
    if (this.ledgers.capacity <= 0) return [];
    const atMs = this.now();
    return calls.map((call, i) => {
      if (call.mode !== "on" || call.failure !== "open") return undefined;
      const sent: Sent = { atMs, seq: ++this.sentCount, units: Math.max(call.cost, units?.[i] ?? 0) };
      // Most calls are answered: no reordering of a known identity (the LRU order is the first call's).
      const known = this.ledgers.get(keyOf(call));
      (known ?? this.ledger(call, atMs)).unheard.push(sent);
      return sent;
    });
  }

  /** Takes in Redis's answer to calls `sent` (each result's figures; what was sent before them is in them). */
  heard(results: readonly RuleResult[], sent: SentCalls): void {
    const atMs = this.now();
    results.forEach((result, i) => {
      const ledger = this.ledgers.get(keyOf(result.call));
      if (ledger === undefined || result.source !== "redis") return;
      const mine = sent[i];
      // Calls sent before this one reached Redis before it: its figures count them.
      if (ledger.unheard.length === 1 && ledger.unheard[0] === mine) ledger.unheard.length = 0;
      else ledger.unheard = ledger.unheard.filter((s) => mine === undefined || s.seq > mine.seq);
      // A lease's units beyond the request's cost are this isolate's own: not left for anyone else.
      const leased = result.lease ? result.lease.units - result.call.cost : 0;
      ledger.heard = {
        left: Math.max(0, result.remaining - leased),
        limit: result.limit,
        atMs,
        wholeAtMs: atMs + (traitsOf(result.call.algorithm).holdsSlot ? result.periodMs : result.resetAfterMs),
      };
    });
  }

  /** Calls `sent` that Redis certainly did not count (refused, unreachable): they no longer weigh. */
  lost(calls: readonly RuleCall[], sent: SentCalls): void {
    calls.forEach((call, i) => {
      const ledger = this.ledgers.get(keyOf(call));
      if (ledger !== undefined) ledger.unheard = ledger.unheard.filter((s) => s !== sent[i]);
    });
  }

  /**
   * Judges one call locally. `slow`: Redis is alive but slow (its share applies); `sent`: the request's own
   * call to Redis, if it sent one. Does not count: call `commit` for each call of an allowed request, so a
   * denied request consumes nothing here either.
   */
  judge(call: RuleCall, slow = false, sent?: Sent): Omit<RuleResultInput, "source" | "reason"> {
    const now = this.now();
    const ledger = this.ledger(call, now);
    const limit = ledger.heard?.limit ?? call.limit;
    const share = slow ? Math.ceil(limit * FALLBACK_SHARE) : limit;
    const allowance = allowanceOf(ledger, call, now, share, sent);
    const resetAfterMs = Math.max(0, (ledger.heard?.wholeAtMs ?? ledger.windowEndMs) - now);
    if (traitsOf(call.algorithm).holdsSlot) {
      const allowed = allowance >= 1;
      return {
        call,
        outcome: allowed ? "allowed" : "denied",
        limit,
        remaining: Math.max(0, allowance - (allowed ? 1 : 0)),
        resetAfterMs: 0,
        retryAfterMs: allowed ? 0 : Math.min(1000, resetAfterMs),
      };
    }
    const left = Math.max(0, allowance);
    if (call.cost > capacityOf(call)) {
      // No wait lets it in: as Redis's, the figures say when more quota comes (src/engine/types.ts).
      return {
        call,
        outcome: "cost-exceeds-capacity",
        limit,
        remaining: left,
        resetAfterMs,
        retryAfterMs: resetAfterMs,
      };
    }
    const allowed = call.cost <= allowance;
    return {
      call,
      outcome: allowed ? "allowed" : "denied",
      limit,
      remaining: left - (allowed ? call.cost : 0),
      resetAfterMs,
      // Quota comes back once the identity is whole again (or the local window ends), whether or not it fits.
      retryAfterMs: resetAfterMs,
    };
  }

  /**
   * Counts an admitted call (`sent`: its call to Redis, whose units it now stands for; `requestId`: for a slot
   * rule, the request holding the slot until `release`).
   */
  commit(call: RuleCall, requestId: string, sent?: Sent): void {
    if (this.ledgers.capacity <= 0) return;
    const now = this.now();
    const ledger = this.ledger(call, now);
    takeBack(ledger, sent, traitsOf(call.algorithm).holdsSlot ? 1 : call.cost);
    if (traitsOf(call.algorithm).holdsSlot) {
      ledger.held ??= new Set();
      ledger.held.add(requestId);
    } else {
      if (ledger.used === 0) ledger.usedSinceMs = now;
      ledger.used += call.cost;
    }
  }

  /** Frees the slot `requestId` holds here under `call`'s rule, if any. */
  release(call: RuleCall, requestId: string): void {
    this.ledgers.get(keyOf(call))?.held?.delete(requestId);
  }

  private ledger(call: RuleCall, now: number): Ledger {
    const key = keyOf(call);
    const ledger = ledgerAt(this.ledgers.get(key), call, now);
    this.ledgers.set(key, ledger);
    return ledger;
  }
}

const keyOf = (call: RuleCall): string => `${call.rule}\u0000${call.identityHash}`;
