/**
 * Ephemeral deny cache: an identity that Redis denied under a rule is answered from isolate memory until
 * its `retryAfterMs` has passed or a second has (whichever comes first), with the same figures Redis gave (times
 * counted down), and without a Redis call. Hot abusive keys then cost one Redis round trip a second per isolate.
 *
 * Safe because a denied request consumes nothing and a cached denial is never a wrong 429 for long: units can
 * come back before the retry time (an admin reset or a raised override, a lease's unspent units returned, a
 * split request's refund, src/resilience/sharded.ts: the denial may have met units held only until that
 * refund landed), so an entry answers for at most `DENY_CACHE_HOLD_MS`, then Redis is asked again. Other
 * isolates also forget a denial an admin reset or override ended when the live-mode refresh replays the
 * change log (src/live/changes.ts). Not cached: `concurrency` and `shed` (a slot may free at any moment),
 * `cost-exceeds-capacity` (no wait would help), and a denial under limits an override set (the script says
 * so: `RuleResult.overridden`): a `ttl` may end the override before the retry time, and nothing here knows
 * when, so a cached denial would outlive it (README "How soon an override applies": its `ttl` ends it exactly).
 *
 * The other rules of the denied request: the cache also keeps the figures Redis gave them in the same
 * decision (`figures`), as long as that decision's denial, so that a request answered here carries one
 * RateLimit member per matched rule, as Redis's own 429 did (README "Responses"). They are Redis's answer
 * (source `deny-cache`, never `redis`: nothing was asked now), and what a client can rely on is what that
 * answer said: `q` and `r` as Redis reported them (the denied request consumed nothing; what other requests
 * or isolates spent since is not in them), times counted down, `t` 0 once more quota was due (then `r` may
 * be less than what is left). Kept only for the same rule, identity, limit and cost, allowed, not holding a
 * slot and under the rule's own limits (as for denials); any other rule is left undecided, with no member.
 */
import { ruleResult } from "../engine/results";
import { holdsSlot, type RuleCall, type RuleResult } from "../engine/types";
import { BoundedMap } from "../util/bounded-map";

/** Most entries kept; the oldest is dropped first. @default 10000 */
export const DEFAULT_DENY_CACHE_ENTRIES = 10_000;

/**
 * Longest a cached denial answers before Redis is asked again, ms: a hot denied identity costs one call a
 * second per isolate, and a denial that units coming back have ended blocks its client a second at most.
 */
export const DENY_CACHE_HOLD_MS = 1000;

interface Entry {
  /** Redis's answer for this rule: a denial, or (`allowed`) figures given beside another rule's denial. */
  result: RuleResult;
  /** When Redis gave the answer, ms. */
  atMs: number;
  /**
   * When the entry stops answering, ms: the denial's retry time, `DENY_CACHE_HOLD_MS` at most; figures', the
   * latest of their decision's.
   */
  untilMs: number;
}

const keyOf = (rule: string, identityHash: string): string => `${rule}\u0000${identityHash}`;
const entryKey = (call: RuleCall): string => keyOf(call.rule, call.identityHash);

/**
 * A denial this cache answers: an enforcing (`on`) call's, under the rule's own limits, with a wait. Not a
 * lease renewal's (cost 0): it is no request, and its wait is shorter than any request's would be.
 */
const keptDenial = (result: RuleResult): boolean =>
  result.outcome === "denied" &&
  result.call.mode === "on" &&
  result.call.cost > 0 &&
  !holdsSlot(result.call.algorithm) &&
  result.retryAfterMs > 0 &&
  !result.overridden;

/** Figures kept beside a denial: an allowed rule that holds no slot, under the rule's own limits. */
const keptFigures = (result: RuleResult): boolean =>
  result.outcome === "allowed" && !holdsSlot(result.call.algorithm) && !result.overridden;

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
   * Remembers what Redis answered for a request it denied (call it with a denied decision's results only):
   * each denial this cache answers, and beside them the other rules' figures. Any other rule of the decision
   * drops what an earlier one left for it: Redis has answered for it since.
   */
  remember(results: readonly RuleResult[]): void {
    if (this.entries.capacity <= 0) return;
    const atMs = this.now();
    let untilMs = 0;
    for (const result of results) {
      if (!keptDenial(result)) continue;
      const entry = { result, atMs, untilMs: atMs + Math.min(result.retryAfterMs, DENY_CACHE_HOLD_MS) };
      this.entries.set(entryKey(result.call), entry);
      untilMs = Math.max(untilMs, entry.untilMs);
    }
    for (const result of results) {
      if (keptDenial(result)) continue;
      // Figures only beside a kept denial; and whatever an earlier decision left here is out of date.
      if (untilMs > 0 && keptFigures(result))
        this.entries.set(entryKey(result.call), { result, atMs, untilMs });
      else this.entries.delete(entryKey(result.call));
    }
  }

  /**
   * The cached denial for this call, times counted down to now, or `undefined` if none applies.
   * A call with a smaller cost than the denied one is not answered here: it may fit sooner. (An override set
   * since the denial reaches this isolate through `forget`, src/live/changes.ts.)
   */
  lookup(call: RuleCall): RuleResult | undefined {
    if (call.mode !== "on" || holdsSlot(call.algorithm)) return undefined;
    const key = entryKey(call);
    const entry = this.entries.get(key);
    // Figures (`allowed`) answer no request on their own: a request matching only their rule asks Redis.
    if (entry === undefined || entry.result.outcome !== "denied") return undefined;
    const now = this.now();
    if (now >= entry.untilMs) {
      this.entries.delete(key);
      return undefined;
    }
    if (call.cost < entry.result.call.cost || call.limit !== entry.result.call.limit) return undefined;
    return answer(entry, call, now);
  }

  /**
   * The figures Redis gave this call's rule beside a denial still cached (ask only once `lookup` found one for
   * the request), times counted down to now, or `undefined`.
   */
  figures(call: RuleCall): RuleResult | undefined {
    if (holdsSlot(call.algorithm)) return undefined;
    const entry = this.entries.get(entryKey(call));
    const now = this.now();
    if (entry === undefined || now >= entry.untilMs) return undefined;
    const given = entry.result;
    if (given.outcome !== "allowed" || call.cost !== given.call.cost || call.limit !== given.call.limit) {
      return undefined;
    }
    return answer(entry, call, now);
  }

  /** Drops what is known about one identity under one rule (e.g. after an admin reset in this isolate). */
  forget(rule: string, identityHash: string): void {
    this.entries.delete(keyOf(rule, identityHash));
  }
}

/** An entry's result for `call`, now: times counted down, nothing leased, delayed or reserved. */
function answer(entry: Entry, call: RuleCall, now: number): RuleResult {
  const elapsedMs = now - entry.atMs;
  return ruleResult({
    ...entry.result,
    call,
    resetAfterMs: Math.max(0, entry.result.resetAfterMs - elapsedMs),
    retryAfterMs: Math.max(0, entry.result.retryAfterMs - elapsedMs),
    source: "deny-cache",
    reason: "deny_cache",
    lease: undefined,
    delayMs: undefined,
    reservation: undefined,
  });
}
