/**
 * The never-throwing Decider: the store's one Redis call, wrapped so that Redis being slow, down,
 * restarted or misconfigured never becomes the reason the API goes down (docs/failure-modes.md).
 *
 * Order per decision: the deny cache (a recent Redis denial answers without a call; one just expired is
 * asked about by one request at a time, the others wait for its answer) → the circuit breaker (open: no
 * call) → the store, bounded by the budget → on failure, the local fallback limiter for fail-open rules and
 * `undecided` for the rest. The caller applies each rule's failure policy.
 */
import { DEFAULTS } from "../engine/defaults";
import { decisionOf, ruleResult } from "../engine/results";
import {
  type DecideOptions,
  type Decider,
  type Decision,
  type DegradedReason,
  failsClosed,
  type Reservation,
  type RuleCall,
  type RuleResult,
  type SettledUnits,
  type Settlement,
} from "../engine/types";
import { within } from "../util/timer";
import { decideWithin } from "./bounded";
import { type BreakerOptions, CircuitBreaker } from "./breaker";
import { DEFAULT_DENY_CACHE_ENTRIES, DenyCache, type RefreshOutcome } from "./deny-cache";
import { classifyFailure, FAILURE_TEXT } from "./failure";
import { DEFAULT_FALLBACK_ENTRIES, FallbackLimiter, type SentCalls } from "./fallback";
import { type DeciderHealth, HealthTracker } from "./health";

export type { DeciderHealth } from "./health";

/** What the decider needs from the store (`createStore` in src/engine/store.ts). */
export interface DecisionStore {
  /** One atomic decision; throws a `StoreError` (with `kind`) when Redis cannot answer. */
  decide(calls: RuleCall[], requestId: string, options?: DecideOptions): Promise<Decision>;
  release(call: RuleCall, requestId: string, reservation?: Reservation): Promise<void>;
  /** Settles costs after their responses (docs/settle.md); absent = never (the reservations stand). */
  settle?(settlements: Settlement[], requestId: string, decidedAtMs: number): Promise<SettledUnits[]>;
}

/** The default grace beyond a decision's budget before the decider stops waiting on the store, ms. */
export const GUARD_MS = 50;

/** Options of {@link EndpointDecider}. */
export interface DeciderOptions {
  /**
   * The decision budget the store enforces (`RATE_LIMIT_TIMEOUT_MS`), ms. The decider gives up itself
   * `guardMs` later, should the store not keep it.
   * @default 200
   */
  timeoutMs?: number;
  /** Grace beyond `timeoutMs` before the decider stops waiting on the store, ms. @default GUARD_MS */
  guardMs?: number;
  /** Circuit breaker tuning (defaults: the docs/failure-modes.md). */
  breaker?: BreakerOptions;
  /** Most identities held by the deny cache; 0 disables it. @default 10000 */
  denyCacheEntries?: number;
  /** Most windows held by the fallback limiter; 0 disables it (fail-open rules then pass unlimited). @default 10000 */
  fallbackEntries?: number;
  /** Where transitions and credential problems are logged. Never receives a secret. @default console.warn */
  log?: (line: string) => void;
  /**
   * Which Redis this decider's log lines are about, when there are several (`endpoint 1`, as health numbers
   * them); added to each line. @default none
   */
  endpointName?: string;
  /** Clock, ms. @default Date.now */
  now?: () => number;
}

/** A Decider that also reports its health and can drop one identity's cached denial. */
export interface ResilientDecider extends Decider {
  health(): DeciderHealth;
  /** Forgets this isolate's cached denial of one identity (call after an admin reset or override). */
  forget(rule: string, identityHash: string): void;
  /**
   * Forgets every block this isolate holds (src/resilience/deny-cache.ts): call when admin resets may have
   * gone unheard (the change log moved on by more than it keeps).
   */
  forgetBlocks(): void;
  /** This isolate's cached denial of `call`, if any (no Redis call; src/resilience/sharded.ts asks first). */
  cachedDenial(call: RuleCall): RuleResult | undefined;
  /** The figures Redis gave `call`'s rule beside a cached denial, if any (src/resilience/deny-cache.ts). */
  cachedFigures(call: RuleCall): RuleResult | undefined;
}

/**
 * Wraps a store into a Decider that never throws: one per Redis endpoint and isolate (the breaker, deny cache
 * and fallback counts live in it), created lazily inside a request: nothing here does I/O or uses timers until
 * `decide` is called.
 *
 * Results not from Redis carry `source` and `reason`. An `undecided` result's `outcome` is `allowed`
 * and means nothing: apply the rule's `failure` policy; its `retryAfterMs` is the breaker's remaining
 * cool-down (at least 1000), for the 503's `Retry-After`; it has no figures for `RateLimit` headers.
 * `allowed: false` is always a real denial (by Redis, the deny cache or the fallback limiter): answer
 * 429 before looking at undecided rules (a deny-cache answer gives the other matched rules the figures Redis
 * gave them beside the denial, where it kept them, and leaves the rest undecided).
 *
 * @example
 * const decider = new EndpointDecider(createStore({ url, token, prefix, timeoutMs }), { timeoutMs });
 * const decision = await decider.decide(calls, crypto.randomUUID());
 */
export class EndpointDecider implements ResilientDecider {
  readonly #store: DecisionStore;
  readonly #now: () => number;
  readonly #log: (line: string) => void;
  readonly #timeoutMs: number;
  readonly #guardMs: number;
  readonly #breaker: CircuitBreaker;
  readonly #denyCache: DenyCache;
  readonly #fallbackEntries: number;
  readonly #fallback: FallbackLimiter;
  readonly #tracker: HealthTracker;
  /** When Redis last answered a decision, ms: a shortened call's timeout counts only once it has been silent. */
  #lastAnsweredAt = Number.NEGATIVE_INFINITY;
  /**
   * Whether the last failed decision timed out: Redis is then taken for alive but slow (it may still count what
   * it was sent, and admit other requests), and the fallback admits only its share (src/resilience/fallback.ts).
   * The breaker's open time keeps the kind of the failures that opened it.
   */
  #slow = false;

  constructor(store: DecisionStore, options: DeciderOptions = {}) {
    this.#store = store;
    const now = options.now ?? Date.now;
    this.#now = now;
    const write = options.log ?? ((line: string) => console.warn(line));
    const { endpointName } = options;
    this.#log = endpointName === undefined ? write : (line: string) => write(`${line} (${endpointName})`);
    this.#timeoutMs = options.timeoutMs ?? DEFAULTS.timeoutMs;
    this.#guardMs = options.guardMs ?? GUARD_MS;
    this.#breaker = new CircuitBreaker(options.breaker, now);
    this.#denyCache = new DenyCache(options.denyCacheEntries ?? DEFAULT_DENY_CACHE_ENTRIES, now);
    this.#fallbackEntries = options.fallbackEntries ?? DEFAULT_FALLBACK_ENTRIES;
    this.#fallback = new FallbackLimiter(this.#fallbackEntries, now);
    this.#tracker = new HealthTracker(this.#log, now);
  }

  async decide(calls: RuleCall[], requestId: string, opts: DecideOptions = {}): Promise<Decision> {
    const startedMs = performance.now();
    const finish = (allowed: boolean, results: RuleResult[]): Decision =>
      decisionOf(allowed, results, performance.now() - startedMs);
    if (calls.length === 0) return finish(true, []);

    const denied = this.#cachedDenialOf(calls);
    if (denied) return finish(false, denied);

    let budgetMs = Math.min(this.#timeoutMs, opts.budgetMs ?? this.#timeoutMs);
    // A denial of this request just expired and another request is asking Redis about it: its answer, not a
    // call of our own (src/resilience/deny-cache.ts says why waiting, and what each answer means here).
    const refreshing = budgetMs > 0 ? this.#denyCache.refreshing(calls) : undefined;
    if (refreshing) {
      const waitedFrom = this.#now();
      const landed = await within(refreshing.landed, budgetMs);
      // Not landed within this request's budget: its failure policy, as after a call of its own that timed
      // out (the breaker counts the refreshing call's outcome, once).
      if (landed === undefined) return this.#degradedDecision(calls, "timeout", finish, requestId);
      if (landed !== "answered") return this.#degradedDecision(calls, landed, finish, requestId);
      const deniedAgain = this.#cachedDenialOf(calls);
      if (deniedAgain) return finish(false, deniedAgain);
      // Let through (on a unit of its own, not ours), or denied in a way that does not answer this request.
      budgetMs -= this.#now() - waitedFrom;
    }
    // No budget left (the request already waited on Redis as long as it may: a live-mode read, a lease call
    // another request sent, a refresh above): a call now would still be counted by Redis, its answer heard or
    // not as a 0 ms abort timer happens to allow, and a negative budget throws in `AbortSignal.timeout`. Redis
    // did not fail: no breaker failure, and, asked before the breaker, no probe taken and left unanswered.
    if (!(budgetMs > 0)) return this.#degradedDecision(calls, "timeout", finish, requestId);

    const admission = this.#breaker.admit();
    if (admission === "skip") return this.#degradedDecision(calls, "breaker_open", finish, requestId);

    const refresh = this.#denyCache.refreshBy(calls, this.#now() + budgetMs + this.#guardMs);
    if (refresh) opts.waitUntil?.(refresh.landed);
    let outcome: RefreshOutcome = "answered";
    const sent = this.#fallback.sent(calls, opts.lease?.units);
    try {
      const decision = await decideWithin(
        this.#store,
        calls,
        requestId,
        budgetMs,
        this.#guardMs,
        opts.onTimer,
        opts.lease ? { lease: opts.lease } : opts.stamps ? { stamps: true } : undefined,
      );
      if (this.#breaker.state !== "closed")
        this.#log("floodgate: Redis answers again; circuit breaker closed");
      this.#breaker.success();
      this.#tracker.succeeded();
      this.#lastAnsweredAt = this.#now();
      this.#fallback.heard(decision.results, sent);
      if (!decision.allowed) this.#denyCache.remember(decision.results);
      return decision;
    } catch (error) {
      outcome = this.#recordFailure(error, admission === "probe", budgetMs < this.#timeoutMs);
      // Refused or unreachable: not counted. A timeout may have been: its units weigh on the fallback.
      if (outcome !== "timeout") this.#fallback.lost(calls, sent);
      return this.#degradedDecision(calls, outcome, finish, requestId, sent);
    } finally {
      // After the answer is in the cache: the requests waiting for it look there first.
      if (refresh) this.#denyCache.settle(refresh, outcome);
    }
  }

  async release(call: RuleCall, requestId: string, reservation?: Reservation): Promise<void> {
    this.#fallback.release(call, requestId);
    // A slot we cannot free now is freed by its lease in Redis; releases never touch the breaker.
    if (this.#breaker.state === "open") return;
    try {
      await this.#store.release(call, requestId, reservation);
    } catch {
      // Same: the lease expires on its own.
    }
  }

  async settle(settlements: Settlement[], requestId: string, decidedAtMs: number): Promise<SettledUnits[]> {
    // Like a release, a settlement never touches the breaker; while it is open the reservations stand.
    if (this.#breaker.state === "open" || !this.#store.settle) throw new Error("Redis is not being called");
    // Units back in Redis may turn a cached denial wrong: this isolate asks Redis again next time.
    for (const { result } of settlements) this.#denyCache.forget(result.call.rule, result.call.identityHash);
    return this.#store.settle(settlements, requestId, decidedAtMs);
  }

  health(): DeciderHealth {
    return this.#tracker.report(this.#breaker);
  }

  forget(rule: string, identityHash: string): void {
    this.#denyCache.forget(rule, identityHash);
  }

  forgetBlocks(): void {
    this.#denyCache.forgetBlocks();
  }

  cachedDenial(call: RuleCall): RuleResult | undefined {
    return this.#denyCache.lookup(call);
  }

  cachedFigures(call: RuleCall): RuleResult | undefined {
    return this.#denyCache.figures(call);
  }

  #undecided(call: RuleCall, reason: DegradedReason): RuleResult {
    const retryAfterMs = Math.max(1000, this.#breaker.remainingOpenMs());
    return ruleResult({
      call,
      outcome: "allowed",
      limit: call.limit,
      remaining: 0,
      resetAfterMs: 0,
      retryAfterMs,
      source: "undecided",
      reason,
    });
  }

  /** The request's results when a cached denial answers it (`deniedFromCache`), else `undefined`. */
  #cachedDenialOf(calls: readonly RuleCall[]): RuleResult[] | undefined {
    return deniedFromCache(
      calls,
      calls.map((call) => this.#denyCache.lookup(call)),
      // Another rule of a request a cached denial answers: the figures kept beside it, else not evaluated.
      (call) => this.#denyCache.figures(call) ?? this.#undecided(call, "deny_cache"),
    );
  }

  /**
   * Redis could not be asked or could not answer: fallback for fail-open `on` rules, undecided otherwise.
   * `sent`: the request's own calls to Redis, which an admission here now stands for.
   */
  #degraded(calls: RuleCall[], reason: DegradedReason, requestId: string, sent: SentCalls): RuleResult[] {
    const slowNow = reason === "timeout" || (reason === "breaker_open" && this.#slow);
    const results = calls.map((call, i) => {
      if (call.mode !== "on" || call.failure !== "open" || this.#fallbackEntries <= 0)
        return this.#undecided(call, reason);
      return ruleResult({ ...this.#fallback.judge(call, slowNow, sent[i]), source: "fallback", reason });
    });
    if (results.every((r) => r.source !== "fallback" || r.outcome === "allowed")) {
      results.forEach((r, i) => {
        if (r.source === "fallback") this.#fallback.commit(r.call, requestId, sent[i]);
      });
    }
    return results;
  }

  #degradedDecision(
    calls: RuleCall[],
    reason: DegradedReason,
    finish: (allowed: boolean, results: RuleResult[]) => Decision,
    requestId: string,
    sent: SentCalls = [],
  ): Decision {
    const results = this.#degraded(calls, reason, requestId, sent);
    const denied = results.some(
      (r) => r.call.mode === "on" && r.source === "fallback" && r.outcome !== "allowed",
    );
    return finish(!denied, results);
  }

  /**
   * Counts a failed call toward the breaker and health. `shortened`: the call had less than the whole budget
   * (its request first waited on Redis for something else: a live-mode read, another request's lease call or
   * refresh). While Redis answered within the last budget, its timeout says only that Redis took longer than
   * what was left, so it does not count toward opening the breaker: else a crowd that waited on one slow call
   * would each time out and open it for every identity of the isolate. A silent Redis answers nothing, so
   * there every timeout counts, shortened or not. A probe always reports. Health hears of every failure.
   */
  #recordFailure(error: unknown, probe: boolean, shortened: boolean): DegradedReason {
    const failure = classifyFailure(error);
    this.#tracker.failed(failure);
    this.#slow = failure.reason === "timeout";
    const answeredLately = this.#now() - this.#lastAnsweredAt < this.#timeoutMs;
    if (shortened && !probe && failure.reason === "timeout" && answeredLately) return failure.reason;
    if (this.#breaker.failure(probe)) {
      this.#log(
        `floodgate: circuit breaker open for ${this.#breaker.remainingOpenMs()} ms after ${this.#breaker.failures} ` +
          `failed Redis decision(s) in a row (last: ${FAILURE_TEXT[failure.kind]}); ` +
          "rules follow their failure policy",
      );
    }
    return failure.reason;
  }
}

/**
 * A never-throwing decider over `store` (an {@link EndpointDecider}): the library's entry to a ready engine
 * for `rateLimit({ decider })`.
 * @example
 * const decider = createDecider(createStore({ url, token, prefix, timeoutMs }), { timeoutMs });
 */
export function createDecider(store: DecisionStore, options: DeciderOptions = {}): ResilientDecider {
  return new EndpointDecider(store, options);
}

/**
 * The results of a request this isolate already knows to be denied (`cached`: a cached denial per call, or
 * `undefined`): the cached denials, and the other rules as `besideDenial` gives them (the figures kept beside
 * a denial, or undecided). `undefined` when no denial is cached, or when a rule left undecided would fail
 * closed: a caller applying the failure policy first would answer 503 to a client that is certainly denied,
 * so that request asks Redis instead.
 */
export function deniedFromCache(
  calls: readonly RuleCall[],
  cached: readonly (RuleResult | undefined)[],
  besideDenial: (call: RuleCall) => RuleResult,
): RuleResult[] | undefined {
  if (!cached.some((r) => r !== undefined)) return undefined;
  const results = calls.map((call, i) => cached[i] ?? besideDenial(call));
  return results.some((r) => r.source === "undecided" && failsClosed(r.call)) ? undefined : results;
}
