/**
 * A region's database, as its decider uses it (docs/regions.md): per (rule, identity) a pool of units the
 * primary leased to the region, spent by one script call for all of a request's rules (lua/region-spend.lua),
 * filled by another (lua/region-deposit.lua). The one decoder of both replies lives here.
 */
import { type CallBudget, createRedisPort, type RedisPort } from "../engine/redis";
import { REGION_DEPOSIT, REGION_SPEND } from "../engine/scripts";
import { stateKey } from "../engine/keys";
import type { RuleCall } from "../engine/types";
import { type BreakerOptions, CircuitBreaker } from "../resilience/breaker";

/**
 * What a deposit's grant said of its rule, kept beside the units so that a request spent from them gets honest
 * headers. Times are the edge's epoch ms (headers and sizing only: never what bounds a spend).
 */
export interface PoolFigures {
  limit: number;
  periodMs: number;
  overridden: boolean;
  /** What the primary's state left beside the leased units when it granted them. */
  stateLeft: number;
  /** When the rule is fully reset, and when more quota comes, by the grant's answer. */
  resetAt: number;
  retryAt: number;
  /** When the units were deposited. */
  depositedAt: number;
}

/** One rule's pool after a spend. */
export interface SpentPool {
  left: number;
  granted: number;
  /** This spend took the pool below half of its grant: the caller renews it (once per grant). */
  renew: boolean;
  figures: PoolFigures;
}

/**
 * When (the region's clock, ms) a (rule, identity) last missed or was granted units, and how many (0: a miss
 * that leased none): the region's pace, for sizing its next ask.
 */
export interface Pace {
  atMs: number;
  units: number;
}

/** A spend's answer: every pool spent, or none (and then the region's clock and each rule's pace). */
export type SpendReply =
  | { spent: true; pools: SpentPool[]; nowMs: number }
  | { spent: false; nowMs: number; paces: (Pace | undefined)[] };

/** A pool's value: "<left>:<granted>:<renewing>:<terms>:<figures>" (lua/region-spend.lua). */
const POOL = /^(\d+):(\d+):(\d):[^:]*:(-?\d+):(\d+):([01]):(-?\d+):(\d+):(\d+):(\d+)$/;

/** The terms a pool was leased under: a request under others never spends it. */
export const termsOf = (call: RuleCall): string => `${call.limit}/${call.periodMs}/${call.burst}`;

/** The tail of a pool's value after its units (lua/region-deposit.lua's ARGV[3]). */
export const poolTail = (call: RuleCall, f: PoolFigures): string =>
  `:0:${termsOf(call)}:${f.limit}:${f.periodMs}:${f.overridden ? 1 : 0}:${f.stateLeft}:${f.resetAt}:${f.retryAt}:${f.depositedAt}`;

/** A pool's value decoded; `undefined` for anything else (never spent from). */
function spentPool(value: unknown, renew: unknown): SpentPool | undefined {
  const m = typeof value === "string" ? POOL.exec(value) : null;
  if (!m) return undefined;
  const n = (i: number) => Number(m[i]);
  return {
    left: n(1),
    granted: n(2),
    renew: renew === 1,
    figures: {
      limit: n(4),
      periodMs: n(5),
      overridden: m[6] === "1",
      stateLeft: n(7),
      resetAt: n(8),
      retryAt: n(9),
      depositedAt: n(10),
    },
  };
}

function paceOf(value: unknown): Pace | undefined {
  const m = typeof value === "string" ? /^(\d+):(\d+)(?::\d+)?$/.exec(value) : null;
  return m ? { atMs: Number(m[1]), units: Number(m[2]) } : undefined;
}

/** How long a pace record lives, ms: past it, a (rule, identity) is new to the region again. */
export const PACE_MS = 120_000;

/** A region's database: its pools. */
export class RegionPools {
  readonly name: string;
  readonly #redis: RedisPort;
  readonly #prefix: string;
  /** The longest life of the region's leases, ms: how long a drop mark must stand. */
  readonly #leaseMs: number;
  /** The database's circuit breaker: the decider asks it before a spend and tells it how the spend went. */
  readonly breaker: CircuitBreaker;

  constructor(
    region: { name: string; url: string; token: string },
    prefix: string,
    timeoutMs: number,
    leaseMs: number,
    breaker?: BreakerOptions,
  ) {
    this.name = region.name;
    this.breaker = new CircuitBreaker(breaker);
    this.#redis = createRedisPort({ url: region.url, token: region.token, timeoutMs });
    this.#prefix = prefix;
    this.#leaseMs = leaseMs;
  }

  /** The pool, next pool and pace keys of a (rule, identity), in the scripts' order. */
  keysOf(rule: string, identityHash: string): [string, string, string] {
    const state = stateKey(this.#prefix, rule, identityHash);
    return [`${state}:pool`, `${state}:pool-next`, `${state}:pace`];
  }

  /** The drop mark of a (rule, identity): when an admin change last dropped its pools (lua/region-deposit.lua). */
  #dropMarkOf(rule: string, identityHash: string): string {
    return `${stateKey(this.#prefix, rule, identityHash)}:pool-dropped`;
  }

  /**
   * Spends every call's cost from its pool, or none (lua/region-spend.lua).
   * @throws {StoreError} when the region's database cannot answer.
   */
  async spend(calls: readonly RuleCall[], budget: CallBudget): Promise<SpendReply> {
    const keys = calls.flatMap((call) => this.keysOf(call.rule, call.identityHash));
    const args = [...calls.flatMap((call) => [String(call.cost), termsOf(call)]), String(PACE_MS)];
    const reply = (await this.#redis.runScript(REGION_SPEND, keys, args, budget)) as unknown[];
    const n = calls.length;
    const nowMs = Number(reply[1]);
    if (reply[0] !== 1) {
      return { spent: false, nowMs, paces: calls.map((_, i) => paceOf(reply[2 + i])) };
    }
    const pools = calls.map((_, i) => spentPool(reply[2 + i], reply[2 + n + i]));
    // A value this edge cannot read was spent all the same: never admit on figures it does not have.
    if (!pools.every((p) => p !== undefined)) return { spent: false, nowMs, paces: [] };
    return { spent: true, pools: pools as SpentPool[], nowMs };
  }

  /**
   * Puts `units` leased for the region into `call`'s pool, to be spent until `endsAtMs` on this database's
   * clock (lua/region-deposit.lua).
   */
  async deposit(
    call: RuleCall,
    units: number,
    regionNowMs: number,
    endsAtMs: number,
    figures: PoolFigures,
  ): Promise<void> {
    const pace = `${regionNowMs}:${units}`;
    await this.#redis.runScript(
      REGION_DEPOSIT,
      [...this.keysOf(call.rule, call.identityHash), this.#dropMarkOf(call.rule, call.identityHash)],
      [
        String(units),
        String(Math.floor(endsAtMs)),
        poolTail(call, figures),
        pace,
        String(PACE_MS),
        String(this.#leaseMs),
      ],
      {},
    );
  }

  /**
   * Drops a (rule, identity)'s pools (an admin reset or override change: docs/regions.md), and marks the drop
   * for a lease's life: a grant asked for before it, still on its way from the primary, is never deposited.
   */
  async drop(rule: string, identityHash: string): Promise<void> {
    const [pool, next] = this.keysOf(rule, identityHash);
    await this.#redis.send(["set", this.#dropMarkOf(rule, identityHash), "1", "PX", String(this.#leaseMs)]);
    await this.#redis.send(["del", pool, next]);
  }
}
