/**
 * The store: a request's rules decided in ONE script call through the Redis port (src/engine/redis.ts), within
 * one time budget. It throws a small typed {@link StoreError} when Redis cannot answer; the resilience layer
 * turns that into a never-throwing `Decider` (failure policies, breaker, fallback).
 */
import { traitsOf } from "./algorithms";
import { DEFAULTS } from "./defaults";
import { capacityUs, resetFenceMs, stateKey } from "./keys";
import { createRedisPort, type RedisPort } from "./redis";
import { decodeRefund, decodeReply } from "./reply";
import { decisionOf, refundOf } from "./results";
import {
  type CallOptions,
  giveBackArguments,
  LEASE,
  refundArguments,
  scriptArguments,
  settleArguments,
} from "./script";
import { StoreError } from "./store-error";
import type {
  DecideOptions,
  Decision,
  RefundCall,
  Reservation,
  RuleCall,
  SettledUnits,
  Settlement,
} from "./types";

/** The store's error and its kinds (src/engine/store-error.ts), named with the store. */
export { StoreError, type StoreErrorKind } from "./store-error";

/** Options of {@link createStore}. */
export interface StoreOptions {
  /** Upstash REST URL (`UPSTASH_REDIS_REST_URL`). */
  url: string;
  /** Upstash REST token (`UPSTASH_REDIS_REST_TOKEN`). */
  token: string;
  /** Prefix of every Redis key. @default "rl" */
  prefix?: string;
  /** Budget for one whole decision, NOSCRIPT reload included, ms (`RATE_LIMIT_TIMEOUT_MS`). @default 200 */
  timeoutMs?: number;
  /** Budget for one admin command or concurrency release (not bound by `timeoutMs`), ms. @default 5000 */
  adminTimeoutMs?: number;
  /**
   * Whether a split decision's refund can reach this database (a Redis Cluster, or one of several databases:
   * docs/scaling-out.md). Only then does a bucket's lease grant or return write its lease mark, which such a
   * refund reads. `false` only where no store on the database splits a request: `createEngine` sets it for
   * one database that is not a cluster. @default true
   */
  splitRefunds?: boolean;
}

/** Decides rules on Redis. */
export interface Store {
  /** The key prefix in use. */
  readonly prefix: string;
  /** The port for admin commands and reads (`adminTimeoutMs` per request unless a call says otherwise). */
  readonly redis: RedisPort;
  /**
   * Decides all `calls` in one atomic script call: allowed only if every `on` rule allows, and then every
   * allowing rule is counted; otherwise nothing is. With `peek`, evaluates but writes nothing.
   * @throws {StoreError} when Redis cannot answer within `timeoutMs`.
   */
  decide(calls: RuleCall[], requestId: string, opts?: CallOptions & DecideOptions): Promise<Decision>;
  /**
   * Frees the `concurrency` slot `requestId` holds under `call` (ZREM); with a `reservation` of a rule with a
   * delay, gives a delayed token-bucket/gcra slot back when it is still the last one reserved and no reset
   * fence stands; a no-op otherwise.
   */
  release(call: RuleCall, requestId: string, reservation?: Reservation): Promise<void>;
  /**
   * Gives back `call.cost` units of each call, consumed at `whenUs` (µs, Redis's clock; 0 = unknown: the
   * current window; negative = at most that many µs ago, the earliest instant they can have been taken, so a
   * window edge crossed since refunds nothing; a token-bucket/GCRA lease's: the TAT it wrote,
   * `LeaseGrant.tatUs`) under `requestId`,
   * in one atomic call; resolves to the units each call got back. Not bound by the decision budget.
   * A negative `whenUs` reaching further back than the reset fence of a call's own limits gives that call
   * nothing, unsent, unless a bucket's stamp bounds it (see `outlivesFence` below).
   * @throws {StoreError} when Redis cannot answer.
   */
  refund(calls: RefundCall[], requestId: string, whenUs: number): Promise<number[]>;
  /**
   * Settles costs after their responses (docs/settle.md): the charges in one settle call (lua/settle.lua), the
   * units to give back in one refund "at most this long ago" (since `decidedAtMs`, the refund's own timeout
   * included), so that a window crossed since, or a bucket's units already elapsed, give nothing back.
   * @throws {StoreError} when Redis cannot answer.
   */
  settle(settlements: Settlement[], requestId: string, decidedAtMs: number): Promise<SettledUnits[]>;
}

/**
 * Whether a refund "at most `-whenUs` µs ago" (a split decision undone, src/resilience/sharded.ts) may concern
 * units taken before a reset whose fence has already fallen: its span is longer than the fence a reset sets
 * for the call's own limits (`resetFenceMs`, src/engine/keys.ts; the admin's fence covers those limits and
 * more). The script cannot tell such units from the fresh state's, so they are not given back: only
 * under-admission, and for a window priced at its own period no loss at all (a span longer than the period
 * holds a window edge, and the script refunds nothing across one). A bucket's stamp bounds its own refund
 * instead when it lies within the fence (`withinFence`).
 */
function outlivesFence(call: RefundCall, whenUs: number): boolean {
  if (whenUs >= 0) return false;
  const stamp = call.pricedAt?.stamp;
  if (stamp && withinFence(call, stamp)) return false;
  const fenceMs = resetFenceMs(call.algorithm, [call]);
  return fenceMs > 0 && -whenUs > fenceMs * 1000;
}

/**
 * Whether the TAT a bucket's decision wrote lay no further ahead of the decision than the rule's own capacity
 * plus its delay, which every reset after it fences (`resetFenceMs`, src/engine/keys.ts): once that fence has
 * fallen the TAT lies behind now, and a refund or give-back that finds it gives nothing that counts
 * (docs/script.md, "Give-back"). Further ahead only under an override of a larger capacity, which a reset after
 * its `ttl` ended does not fence for: such a stamp proves nothing.
 */
function withinFence(call: RuleCall, { tatUs, writtenAtUs }: Reservation): boolean {
  const reachUs = capacityUs(call) + (call.delayMs ?? 0) * 1000;
  return tatUs > 0 && writtenAtUs > 0 && tatUs - writtenAtUs <= reachUs;
}

/** A reply the decoder cannot read: the script's fault, not Redis's absence. */
function decodedBy<T>(decode: () => T): T {
  try {
    return decode();
  } catch (error) {
    throw new StoreError("script", (error as Error).message, { cause: error });
  }
}

/**
 * Creates a store. Validates its options once; no I/O until the first call.
 * @example
 * const store = createStore({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN, timeoutMs: 200 });
 * const decision = await store.decide(calls, crypto.randomUUID());
 */
export function createStore(options: StoreOptions): Store {
  const {
    url,
    token,
    prefix = DEFAULTS.prefix,
    timeoutMs = DEFAULTS.timeoutMs,
    adminTimeoutMs = DEFAULTS.adminTimeoutMs,
    splitRefunds = true,
  } = options;
  if (!url || !token) throw new Error("createStore: `url` and `token` are required");
  if (!(timeoutMs > 0)) throw new Error("createStore: `timeoutMs` must be a positive number of milliseconds");

  const redis = createRedisPort({ url, token, timeoutMs: adminTimeoutMs });

  async function decide(
    calls: RuleCall[],
    requestId: string,
    opts: CallOptions & DecideOptions = {},
  ): Promise<Decision> {
    const startedAt = Date.now();
    if (calls.length === 0) return decisionOf(true, [], 0);
    const deadline = startedAt + Math.min(timeoutMs, opts.budgetMs ?? timeoutMs);
    const { script, keys, args } = scriptArguments(prefix, calls, requestId, opts, splitRefunds);
    // The one budget covers the whole decision, a NOSCRIPT reload included.
    const raw = await redis.runScript(script, keys, args, { deadline, signal: opts.signal });
    const decoded = decodedBy(() => decodeReply(raw, calls, script === LEASE));
    return decisionOf(decoded.allowed, decoded.results, Date.now() - startedAt);
  }

  async function release(call: RuleCall, requestId: string, reservation?: Reservation): Promise<void> {
    // Only a rule with a delay gets give-backs (docs/script.md, "Returned units": a split refund may have
    // moved another bucket since), and only within what a reset's fence covers.
    if (reservation && (call.delayMs ?? 0) > 0 && withinFence(call, reservation)) {
      const { script, keys, args } = giveBackArguments(prefix, call, reservation);
      await redis.runScript(script, keys, args);
      return;
    }
    // Only slots (concurrency, shed) are held past the decision.
    if (!traitsOf(call.algorithm).holdsSlot) return;
    await redis.send(["zrem", stateKey(prefix, call.rule, call.identityHash), requestId]);
  }

  async function refund(calls: RefundCall[], requestId: string, whenUs: number): Promise<number[]> {
    const dropped = calls.map((call) => outlivesFence(call, whenUs));
    if (dropped.includes(true)) {
      const sent = calls.filter((_, i) => !dropped[i]);
      const given = sent.length > 0 ? await refund(sent, requestId, whenUs) : [];
      let next = 0;
      return dropped.map((out) => (out ? 0 : (given[next++] ?? 0)));
    }
    if (calls.length === 0) return [];
    const { script, keys, args } = refundArguments(prefix, calls, requestId, whenUs, splitRefunds);
    const raw = await redis.runScript(script, keys, args);
    return decodedBy(() => decodeRefund(raw, calls));
  }

  async function settle(
    settlements: Settlement[],
    requestId: string,
    decidedAtMs: number,
  ): Promise<SettledUnits[]> {
    const charges = settlements.filter((s) => s.units > 0);
    const backs = settlements.filter((s) => s.units < 0);
    const charging = async (): Promise<number[]> => {
      if (charges.length === 0) return [];
      const { script, keys, args } = settleArguments(prefix, charges);
      const raw = await redis.runScript(script, keys, args);
      return decodedBy(() =>
        decodeRefund(
          raw,
          charges.map((s) => s.result.call),
        ),
      );
    };
    // The units were taken after `decidedAtMs`; the refund lands within its timeout of now.
    const ageUs = Math.ceil((Date.now() - decidedAtMs + adminTimeoutMs + 1) * 1000);
    const [remaining, given] = await Promise.all([
      charging(),
      backs.length === 0
        ? Promise.resolve([] as number[])
        : refund(
            backs.map((s) => refundOf(s.result, -s.units)),
            requestId,
            -ageUs,
          ),
    ]);
    let c = 0;
    let b = 0;
    return settlements.map((s) =>
      s.units > 0 ? { applied: s.units, remaining: remaining[c++] ?? 0 } : { applied: -(given[b++] ?? 0) },
    );
  }

  return { prefix, redis, decide, release, refund, settle };
}
