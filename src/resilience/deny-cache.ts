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
 * change log (src/live/changes.ts). Not cached: `concurrency` and `shed` (a slot may free at any moment), a
 * rule counting by status (`RuleCall.givesBackAfterResponse`: a request in flight may give its units back),
 * `cost-exceeds-capacity` (no wait would help), and a denial under limits an override set (the script says
 * so: `RuleResult.overridden`): a `ttl` may end the override before the retry time, and nothing here knows
 * when, so a cached denial would outlive it (docs/operating.md, "How soon an override applies": its `ttl` ends it exactly).
 *
 * Once an entry has expired, ONE request per (rule, identity) asks Redis again (`refreshBy`); the requests the
 * expired denial would have answered that arrive meanwhile wait for that call (`refreshing`) instead of each
 * sending one, which would cost a hot key (requests a second × round trip) calls at every expiry. They wait
 * rather than being answered from the expired denial for one more round trip because its time is over: it
 * may have expired at its own retry time, when a client that kept to `Retry-After` must get Redis's answer,
 * not a 429 that already knows itself stale. They wait within their own budget, and then: Redis denied
 * again → its new denial answers them (same rule, identity, limit, and a cost no smaller, as for any cached
 * denial), sooner than a call of their own would have; Redis let the request through → they decide
 * themselves (that unit was the other request's: one round trip more, once per denial); Redis could not
 * answer → their failure policy, as that call's.
 *
 * The other rules of the denied request: the cache also keeps the figures Redis gave them in the same
 * decision (`figures`), as long as that decision's denial, so that a request answered here carries one
 * RateLimit member per matched rule, as Redis's own 429 did (README "Responses"). They are Redis's answer
 * (source `deny-cache`, never `redis`: nothing was asked now), and what a client can rely on is what that
 * answer said: `q` and `r` as Redis reported them (the denied request consumed nothing; what other requests
 * or isolates spent since is not in them), times counted down, `t` 0 once more quota was due (then `r` may
 * be less than what is left). Kept only for the same rule, identity, limit and cost, allowed, not holding a
 * slot and under the rule's own limits (as for denials); any other rule is left undecided, with no member.
 *
 * A block (a rule's `block`, docs/protect.md "Penalty box") is held to its end, not `DENY_CACHE_HOLD_MS`: no
 * unit coming back ends it, only an admin reset, which reaches this isolate through `forget` (here, or from
 * the change log within about a second, src/live/index.ts; when the log overflowed, `forgetBlocks` drops them
 * all). It answers every enforcing call of its rule and identity, whatever its cost or limits (an override or
 * a tier changes neither), so a blocked client costs no Redis call until its block ends.
 */
import { traitsOf } from "../engine/algorithms";
import { retryAfterForMore, ruleResult } from "../engine/results";
import { capacityOf, type DegradedReason, type RuleCall, type RuleResult, sameLimits } from "../engine/types";
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
  /** The Redis call asking again about this expired denial, once a request has sent it. */
  refresh: Refresh | undefined;
}

/**
 * How a refresh ended: `answered` (Redis's answer is in the cache: a denial again, or no entry when it let the
 * request through), else why Redis could not answer.
 */
export type RefreshOutcome = "answered" | DegradedReason;

/**
 * One request's Redis call about expired denials, which the requests they would have answered wait for.
 * It runs under its request's `waitUntil`, so it lands even if that request is cancelled, and is awaited within
 * each waiter's own budget (src/leases/table.ts waits for a lease call the same way).
 */
export class Refresh {
  /** Settles once the call's answer is in the cache (never rejects). */
  readonly landed: Promise<RefreshOutcome>;
  /** The entries it refreshes. */
  readonly keys: string[] = [];
  private end!: (outcome: RefreshOutcome) => void;

  /**
   * `untilMs`: the latest it can land (the call's budget and the decider's grace): past it, its request's context
   * went with it, and the next request asks Redis again.
   */
  constructor(readonly untilMs: number) {
    this.landed = new Promise((resolve) => {
      this.end = resolve;
    });
  }

  /** Called by `DenyCache.settle` only. */
  finish(outcome: RefreshOutcome): void {
    this.end(outcome);
  }
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
  !traitsOf(result.call.algorithm).holdsSlot &&
  result.retryAfterMs > 0 &&
  // Units coming back end neither a block nor anything it is kept for: only a reset does (see above).
  (result.blocked !== undefined || (!result.call.givesBackAfterResponse && !result.overridden));

/** How long a kept denial answers, ms: a block to its end, any other denial `DENY_CACHE_HOLD_MS` at most. */
const holdMs = (result: RuleResult): number =>
  result.blocked !== undefined ? result.retryAfterMs : Math.min(result.retryAfterMs, DENY_CACHE_HOLD_MS);

/** Figures kept beside a denial: an allowed rule that holds no slot, under the rule's own limits. */
const keptFigures = (result: RuleResult): boolean =>
  result.outcome === "allowed" && !traitsOf(result.call.algorithm).holdsSlot && !result.overridden;

/** The cache. Plain values only (workerd: nothing request-bound survives a request). */
export class DenyCache {
  private readonly entries: BoundedMap<string, Entry>;

  constructor(
    maxEntries: number = DEFAULT_DENY_CACHE_ENTRIES,
    private readonly now: () => number = Date.now,
  ) {
    this.entries = new BoundedMap(maxEntries);
  }

  /** Entries held right now (an expired one included until a refresh, a new answer or eviction drops it). */
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
    let latestMs = 0;
    for (const result of results) {
      if (!keptDenial(result)) continue;
      const untilMs = atMs + holdMs(result);
      const entry: Entry = { result, atMs, untilMs, refresh: undefined };
      this.entries.set(entryKey(result.call), entry);
      latestMs = Math.max(latestMs, untilMs);
    }
    for (const result of results) {
      if (keptDenial(result)) continue;
      // Figures only beside a kept denial; and whatever an earlier decision left here is out of date.
      if (latestMs > 0 && keptFigures(result))
        this.entries.set(entryKey(result.call), { result, atMs, untilMs: latestMs, refresh: undefined });
      else this.entries.delete(entryKey(result.call));
    }
  }

  /**
   * The cached denial for this call, times counted down to now, or `undefined` if none applies.
   * A call with a smaller cost than the denied one is not answered here: it may fit sooner. (An override set
   * since the denial reaches this isolate through `forget`, src/live/changes.ts.)
   */
  lookup(call: RuleCall): RuleResult | undefined {
    const entry = this.denialFor(call);
    if (entry === undefined) return undefined;
    const now = this.now();
    // Expired: kept for the request that asks Redis again (`refreshBy`) and the ones that wait for it.
    return now < entry.untilMs ? answer(entry, call, now) : undefined;
  }

  /**
   * For a request no cached denial answers (`lookup`): the refresh on its way of an expired denial that would
   * have answered one of its calls, which the request waits for instead of asking Redis too; else `undefined`.
   */
  refreshing(calls: readonly RuleCall[]): Refresh | undefined {
    if (this.entries.size === 0) return undefined;
    const now = this.now();
    for (const call of calls) {
      const refresh = this.expired(call, now)?.refresh;
      if (refresh !== undefined && now < refresh.untilMs) return refresh;
    }
    return undefined;
  }

  /**
   * Marks the expired denials that would have answered `calls` as asked about by the request that is about to
   * ask Redis, until `untilMs` at the latest; `undefined` when there are none (nothing to settle). Its caller
   * must `settle` the refresh once the call's answer is in the cache, whatever became of it.
   */
  refreshBy(calls: readonly RuleCall[], untilMs: number): Refresh | undefined {
    if (this.entries.size === 0) return undefined;
    const now = this.now();
    let refresh: Refresh | undefined;
    for (const call of calls) {
      const entry = this.expired(call, now);
      if (entry === undefined || (entry.refresh !== undefined && now < entry.refresh.untilMs)) continue;
      refresh ??= new Refresh(untilMs);
      entry.refresh = refresh;
      refresh.keys.push(entryKey(call));
    }
    return refresh;
  }

  /**
   * Ends `refresh`: the expired denials it asked about and Redis did not deny again go (the denial is over, or
   * Redis could not say: the failure policy decides until it can), then its waiters resume.
   */
  settle(refresh: Refresh, outcome: RefreshOutcome): void {
    for (const key of refresh.keys) {
      if (this.entries.get(key)?.refresh === refresh) this.entries.delete(key);
    }
    refresh.finish(outcome);
  }

  /** The expired denial that would have answered `call`. */
  private expired(call: RuleCall, now: number): Entry | undefined {
    const entry = this.denialFor(call);
    return entry !== undefined && now >= entry.untilMs ? entry : undefined;
  }

  /**
   * The denial, live or expired, that answers `call`: an enforcing call's, not holding a slot, of the same rule,
   * identity and limit, and a cost no smaller. Figures (`allowed`) answer no request on their own: a request
   * matching only their rule asks Redis.
   */
  private denialFor(call: RuleCall): Entry | undefined {
    if (call.mode !== "on" || traitsOf(call.algorithm).holdsSlot) return undefined;
    const entry = this.entries.get(entryKey(call));
    if (entry === undefined || entry.result.outcome !== "denied") return undefined;
    // A block denies its identity under its rule whatever the request costs or the limits in force.
    if (entry.result.blocked !== undefined) return entry;
    const denied = entry.result.call;
    if (call.cost < denied.cost || !sameLimits(call, denied)) return undefined;
    // More than the rule can ever grant: Redis says so, with its one-period wait.
    if (call.cost > capacityOf(call)) return undefined;
    // A larger cost whose wait only Redis knows (a sliding window's or log's past requests draining enough).
    const more = call.cost - denied.cost;
    if (more > 0 && traitsOf(call.algorithm).logic.waitForMore(entry.result, more) === undefined)
      return undefined;
    return entry;
  }

  /**
   * The figures Redis gave this call's rule beside a denial still cached (ask only once `lookup` found one for
   * the request), times counted down to now, or `undefined`.
   */
  figures(call: RuleCall): RuleResult | undefined {
    if (traitsOf(call.algorithm).holdsSlot) return undefined;
    const entry = this.entries.get(entryKey(call));
    const now = this.now();
    if (entry === undefined || now >= entry.untilMs) return undefined;
    const given = entry.result;
    if (given.outcome !== "allowed" || call.cost !== given.call.cost || !sameLimits(call, given.call)) {
      return undefined;
    }
    return answer(entry, call, now);
  }

  /** Drops what is known about one identity under one rule (e.g. after an admin reset in this isolate). */
  forget(rule: string, identityHash: string): void {
    this.entries.delete(keyOf(rule, identityHash));
  }

  /**
   * Drops every block held (and the figures beside them): resets this isolate may not have heard of (the
   * change log moved on by more than it keeps) may have lifted any of them.
   */
  forgetBlocks(): void {
    for (const [key, entry] of this.entries) {
      if (entry.result.blocked !== undefined) this.entries.delete(key);
    }
  }
}

/** An entry's result for `call`, now: times counted down, nothing leased, delayed or reserved. */
function answer(entry: Entry, call: RuleCall, now: number): RuleResult {
  const elapsedMs = now - entry.atMs;
  return ruleResult({
    ...entry.result,
    call,
    resetAfterMs: Math.max(0, entry.result.resetAfterMs - elapsedMs),
    // A larger cost than the denied one waits longer (a bucket's refill, a sliding window's drain); not
    // longer than a block, which ends at its end whatever the cost.
    retryAfterMs: Math.max(
      0,
      (entry.result.blocked !== undefined
        ? entry.result.retryAfterMs
        : retryAfterForMore(entry.result, call.cost - entry.result.call.cost)) - elapsedMs,
    ),
    source: "deny-cache",
    reason: "deny_cache",
    // The block a cached denial started stands now.
    blocked: entry.result.blocked && "standing",
    lease: undefined,
    delayMs: undefined,
    reservation: undefined,
  });
}
