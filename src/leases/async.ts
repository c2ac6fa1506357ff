/**
 * `sync = "async"` rules (docs/going-global.md, "Async rules"): for limits where latency matters more than the
 * last unit. A request whose every rule is async is decided here, from what this isolate last heard from Redis
 * about each (rule, identity), with no Redis call and no promise; the units it admits are counted in Redis
 * after the response, batched per isolate (one background flush at a time, in `waitUntil`: each (rule,
 * identity) with units waiting sends them all in one call). A request that also matches an exact rule goes
 * down the stack, all its rules in the one call as always: exact.
 *
 * How far it may over-admit. This isolate admits, per (rule, identity), at most `share` units Redis has not
 * counted yet: the least of what Redis last said was left and a tenth of the rule's capacity (at least one
 * request's cost); an identity it never heard of is granted that tenth. A flush that finds Redis without room
 * for all its units counts what fits and learns that nothing is left, after which the isolate denies until
 * Redis's retry time, then lets one request through to ask again. So units admitted beyond the limit come only
 * from the flush that found Redis full: at most `share` per isolate each time the limit is reached, plus, while
 * it stays reached, one request per isolate per retry time. Across N isolates hammering one identity: at most
 * N × share over the limit per window (the proof and the measurement: docs/going-global.md).
 */
import { decisionOf, ruleResult } from "../engine/results";
import {
  capacityOf,
  type DecideOptions,
  type Decision,
  type RuleCall,
  type RuleResult,
  type WaitUntil,
} from "../engine/types";
import type { ResilientDecider } from "../resilience/decider";
import { DeciderLayer, type InnerDecider } from "../resilience/layer";
import { BoundedMap } from "../util/bounded-map";

/** The part of a rule's capacity an isolate may admit without Redis having counted it. */
export const ASYNC_SHARE = 0.1;

/** Most (rule, identity) pairs an isolate tracks for async rules. */
const TRACKED = 10_000;

/** Rounds one flush sends before it ends (units arriving during the last wait go with the next request's). */
const FLUSH_ROUNDS = 8;

/** A flush not done after this long is taken for lost (its request's context gone), ms. */
const FLUSH_LOST_MS = 10_000;

/** How long an isolate that could not count its units waits before it admits again on a spent view, ms. */
const UNCOUNTED_RETRY_MS = 1000;

/** What this isolate knows of one async (rule, identity). */
interface AsyncState {
  /** Units Redis said were left at its last answer; `undefined` = never heard. */
  left: number | undefined;
  /** When Redis's last answer said a unit frees (isolate clock, ms). */
  retryAt: number;
  /** When Redis's last answer said the state is whole again (isolate clock, ms). */
  resetAt: number;
  /** Units admitted here, not yet sent to Redis, and the call to count them with (its latest). */
  unsent: number;
  call: RuleCall;
  /** Units on their way to Redis. */
  sending: number;
}

/** Whether a request is decided here: it has rules, and every one of them is async. */
const allAsync = (calls: readonly RuleCall[]): boolean =>
  calls.length > 0 && calls[0]?.sync === "async" && calls.every((call) => call.sync === "async");

/**
 * Decides requests of async rules only in the isolate, over `inner`, which decides every other request;
 * `count` counts their units afterwards: the exact stack below leases (one call per (rule, identity)).
 * @example
 * const decider = new AsyncDecider(new LeasingDecider(sharded, { maxMs: 1000 }), sharded);
 */
export class AsyncDecider extends DeciderLayer {
  readonly #count: Pick<ResilientDecider, "decide" | "forget">;
  readonly #now: () => number;
  readonly #states = new BoundedMap<string, AsyncState>(TRACKED);
  /** When the flush on its way started (ms), if one is: one at a time. */
  #flushingSince: number | undefined;

  constructor(
    inner: InnerDecider,
    count: Pick<ResilientDecider, "decide" | "forget">,
    now: () => number = Date.now,
  ) {
    super(inner);
    this.#count = count;
    this.#now = now;
  }

  /** An async request decided here, at once; any other from the leases below, if they can. */
  decideNow(calls: RuleCall[], requestId: string, waitUntil?: WaitUntil): Decision | undefined {
    if (allAsync(calls)) return this.#decideHere(calls, waitUntil);
    return this.inner.decideNow?.(calls, requestId, waitUntil);
  }

  async decide(calls: RuleCall[], requestId: string, opts: DecideOptions = {}): Promise<Decision> {
    if (allAsync(calls)) return this.#decideHere(calls, opts.waitUntil);
    const decision = await this.inner.decide(calls, requestId, opts);
    // An async rule decided in Redis with an exact one: what Redis said is this isolate's view from now on.
    for (const result of decision.results) {
      if (result.call.sync === "async" && result.source === "redis")
        this.#heard(this.#stateOf(result.call), result);
    }
    return decision;
  }

  override forget(rule: string, identityHash: string): void {
    this.#states.delete(`${rule}\u0000${identityHash}`);
    this.inner.forget(rule, identityHash);
  }

  #stateOf(call: RuleCall): AsyncState {
    const key = `${call.rule}\u0000${call.identityHash}`;
    let state = this.#states.get(key);
    if (state === undefined) {
      state = { left: undefined, retryAt: 0, resetAt: 0, unsent: 0, call, sending: 0 };
      this.#states.set(key, state);
    }
    return state;
  }

  /** How many units this isolate may have admitted and not yet seen counted (see the module comment). */
  #share(state: AsyncState, call: RuleCall, at: number): number {
    const tenth = Math.max(call.cost, Math.ceil(capacityOf(call) * ASYNC_SHARE));
    if (state.left === undefined) return tenth;
    if (state.left > 0) return Math.min(state.left, tenth);
    return at >= state.retryAt ? call.cost : 0; // out: one request asks again once Redis said a unit frees
  }

  #decideHere(calls: RuleCall[], waitUntil: WaitUntil | undefined): Decision {
    const at = this.#now();
    const states = calls.map((call) => this.#stateOf(call));
    const room = calls.map((call, i) => {
      const state = states[i] as AsyncState;
      return this.#share(state, call, at) - state.unsent - state.sending;
    });
    // All or nothing, as in Redis: a request an `on` rule denies is counted by none.
    const allowed = calls.every((call, i) => call.mode !== "on" || (room[i] as number) >= call.cost);
    const results = calls.map((call, i) => {
      const state = states[i] as AsyncState;
      const fits = (room[i] as number) >= call.cost;
      const left = (state.left ?? capacityOf(call)) - state.unsent - state.sending;
      return ruleResult({
        call,
        outcome: fits ? "allowed" : "denied",
        limit: call.limit,
        remaining: Math.max(0, left - (allowed ? call.cost : 0)),
        resetAfterMs: Math.max(0, state.resetAt - at),
        retryAfterMs: fits ? 0 : Math.max(1000, state.retryAt - at),
        source: "async",
      });
    });
    if (allowed) {
      calls.forEach((call, i) => {
        const state = states[i] as AsyncState;
        state.unsent += call.cost;
        state.call = call;
      });
      // A flush still "running" long after it started was lost with its request's context: start another.
      const since = this.#flushingSince;
      if (waitUntil && (since === undefined || at - since > FLUSH_LOST_MS)) waitUntil(this.#flush(at));
    }
    return decisionOf(allowed, results, 0);
  }

  /**
   * Counts every (rule, identity)'s waiting units in Redis, again while more arrived meanwhile (a few rounds:
   * the next request starts another); one flush at a time.
   */
  async #flush(at: number): Promise<void> {
    this.#flushingSince = at;
    try {
      for (let round = 0; round < FLUSH_ROUNDS; round++) {
        const waiting = [...this.#states.values()].filter((state) => state.unsent > 0);
        if (waiting.length === 0) return;
        await Promise.all(waiting.map((state) => this.#countOne(state)));
      }
    } finally {
      this.#flushingSince = undefined;
    }
  }

  async #countOne(state: AsyncState): Promise<void> {
    const units = state.unsent;
    state.unsent = 0;
    state.sending += units;
    try {
      let result = await this.#countUnits(state.call, units);
      // No room for all of them: Redis counted nothing; count what fits, once (past the denial the decider
      // just cached: it is about these units, not the fewer ones). Then nothing is left until the denial's
      // retry time.
      if (result?.outcome === "denied" && result.remaining > 0 && result.remaining < units) {
        const denied = result;
        this.#count.forget(state.call.rule, state.call.identityHash);
        const rest = await this.#countUnits(state.call, denied.remaining);
        if (rest?.outcome === "allowed")
          result = { ...rest, remaining: 0, retryAfterMs: denied.retryAfterMs };
      }
      if (result === undefined) {
        // Redis could not answer: the units are not sent again (it may have counted them), and this isolate
        // takes them as counted, so that an outage spends its view instead of admitting without end.
        const left = Math.max(0, (state.left ?? capacityOf(state.call)) - units);
        state.left = left;
        if (left === 0) state.retryAt = this.#now() + UNCOUNTED_RETRY_MS;
        return;
      }
      this.#heard(state, result);
    } finally {
      state.sending -= units;
    }
  }

  /** Redis's answer about a (rule, identity): this isolate's view from now on. */
  #heard(state: AsyncState, result: RuleResult): void {
    const at = this.#now();
    state.left = result.outcome === "allowed" ? result.remaining : 0;
    state.retryAt = at + result.retryAfterMs;
    state.resetAt = at + result.resetAfterMs;
  }

  /**
   * One exact call counting `units` of `call`: Redis's result (or the denial it gave a moment ago, which the
   * deny cache holds), or `undefined` when Redis did not decide.
   */
  async #countUnits(call: RuleCall, units: number): Promise<RuleResult | undefined> {
    const decision = await this.#count.decide([{ ...call, cost: units, mode: "on" }], "-");
    const result = decision.results[0];
    return result?.source === "redis" || result?.source === "deny-cache" ? result : undefined;
  }
}
