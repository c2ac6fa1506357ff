/**
 * Ephemeral deny cache: an identity that Redis denied under a rule is answered from isolate memory until
 * its `retryAfterMs` has passed, with the same figures Redis gave (times counted down), and without a
 * Redis call. Hot abusive keys then stop costing Redis round trips.
 *
 * Safe because a denied request consumes nothing: until `retryAfterMs` the same request (same cost or
 * more) would be denied by Redis too. The exception is an admin reset or a raised override: other isolates
 * forget their cached denial when the live-mode refresh replays the change log (within about a second,
 * src/live/changes.ts). Not cached: `concurrency` and `shed` (a slot may free at any moment),
 * `cost-exceeds-capacity` (no wait would help), and a rule whose call read an override (`override` not
 * `false`: the identity has one, or the isolate does not know): Redis denied it under limits that a `ttl`
 * may end before the retry time, and nothing here knows when, so a cached denial would outlive the override
 * (README "How soon an override applies": its `ttl` ends it exactly).
 */
import { holdsSlot, type RuleCall, type RuleResult, ruleResult } from "../engine/types";
import { BoundedMap } from "../util/bounded-map";

/** Most entries kept; the oldest is dropped first. @default 10000 */
export const DEFAULT_DENY_CACHE_ENTRIES = 10_000;

interface Entry {
  result: RuleResult;
  /** When Redis gave the answer, ms. */
  atMs: number;
  /** When the identity may be allowed again, ms. */
  untilMs: number;
}

const keyOf = (rule: string, identityHash: string): string => `${rule}\u0000${identityHash}`;
const entryKey = (call: RuleCall): string => keyOf(call.rule, call.identityHash);

/** The cache. Plain values only (workerd: nothing request-bound survives a request). */
export class DenyCache {
  private readonly entries: BoundedMap<string, Entry>;

  constructor(
    maxEntries: number = DEFAULT_DENY_CACHE_ENTRIES,
    private readonly now: () => number = Date.now,
  ) {
    this.entries = new BoundedMap(maxEntries);
  }

  /** Entries held right now (expired ones included until touched). */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Remembers a rule Redis denied for an enforcing (`on`) call that read no override. Not a lease renewal's
   * (cost 0): it is no request, and its wait is shorter than any request's would be.
   */
  remember(result: RuleResult): void {
    const { call } = result;
    if (this.entries.capacity <= 0 || call.mode !== "on" || result.outcome !== "denied") return;
    if (call.cost === 0 || call.override !== false) return;
    if (holdsSlot(call.algorithm) || result.retryAfterMs <= 0) return;
    const key = entryKey(call);
    const atMs = this.now();
    this.entries.set(key, { result, atMs, untilMs: atMs + result.retryAfterMs });
  }

  /**
   * The cached denial for this call, times counted down to now, or `undefined` if none applies.
   * A call with a smaller cost than the denied one is not answered here: it may fit sooner; nor one that
   * reads an override (the isolate learnt of one since the denial).
   */
  lookup(call: RuleCall): RuleResult | undefined {
    if (call.mode !== "on" || call.override !== false || holdsSlot(call.algorithm)) return undefined;
    const key = entryKey(call);
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    const now = this.now();
    if (now >= entry.untilMs) {
      this.entries.delete(key);
      return undefined;
    }
    if (call.cost < entry.result.call.cost || call.limit !== entry.result.call.limit) return undefined;
    const elapsedMs = now - entry.atMs;
    return ruleResult({
      ...entry.result,
      call,
      resetAfterMs: Math.max(0, entry.result.resetAfterMs - elapsedMs),
      retryAfterMs: entry.untilMs - now,
      source: "deny-cache",
      reason: "deny_cache",
    });
  }

  /** Drops what is known about one identity under one rule (e.g. after an admin reset in this isolate). */
  forget(rule: string, identityHash: string): void {
    this.entries.delete(keyOf(rule, identityHash));
  }
}
