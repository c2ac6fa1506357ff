/**
 * What each algorithm is, said once: one row per algorithm, read by everything that treats algorithms
 * differently (validation, the script's arguments, results, headers, the deny cache, leases, the admin API
 * and the dashboard). None of them asks for an algorithm's name; each asks this table for the trait it
 * depends on. The limiting itself lives in the script (lua/); a row's `logic` is the algorithm's TypeScript
 * module (src/engine/algorithms/), for what the edge works out beyond data.
 *
 * Adding an algorithm: a row here, a module there, a fragment of the script (docs/adding-an-algorithm.md).
 */
import { concurrency } from "./algorithms/concurrency";
import { fixedWindow } from "./algorithms/fixed-window";
import type { AlgorithmLogic } from "./algorithms/logic";
import { MAX_LOG_REQUESTS, slidingLog } from "./algorithms/sliding-log";
import { slidingWindow } from "./algorithms/sliding-window";
import { tokenBucket } from "./algorithms/token-bucket";

/** One algorithm's traits. */
export interface AlgorithmTraits {
  /** The algorithm's code in the script's arguments (slot 0 of each rule: lua/decide/rules.lua). */
  readonly code: number;
  /**
   * The state's shape: `window` counts units over `period`; `bucket` is one TAT whose capacity is `burst`
   * (the script's fence and stamps handle its TAT); `slots` are requests in flight.
   */
  readonly shape: "window" | "bucket" | "slots";
  /**
   * A request holds a slot until the Worker has written its response, then releases it; a slot is never
   * refunded, leased or cached by the deny cache, and the local fallback limiter counts it held until released.
   */
  readonly holdsSlot: boolean;
  /** The state stores the request id (a log's members, a slot): the script needs a real one. */
  readonly storesRequestId: boolean;
  /** `period` is required; otherwise it is the slot lease, `DEFAULT_SLOT_LEASE_MS` unless set. */
  readonly needsPeriod: boolean;
  /** Reads `burst` (the rule's, a tier's, an override's): the capacity is the burst, not the limit. */
  readonly takesBurst: boolean;
  /** Reads `cost`; without it a request counts one (one slot per request). */
  readonly takesCost: boolean;
  /** Accepts `delay` (hold a request over the rate for its reserved slot, docs/algorithms.md, "Delay instead of deny"). */
  readonly takesDelay: boolean;
  /** Takes priority classes (`priority`, `priorities`, `shards`: docs/algorithms.md, "Priority load shedding"). */
  readonly takesPriorities: boolean;
  /**
   * Accepts `block` (a denial keeps the identity out for a while: docs/protect.md, "Penalty box"): a rule that
   * counts; not a slot, which frees the moment a request ends.
   */
  readonly takesBlock: boolean;
  /** May be decided from a lease (docs/leases.md). */
  readonly leasable: boolean;
  /**
   * Accepts `settle` (the real cost from the response, charged or given back after it: docs/settle.md): a
   * state that counts units, where a charge is one write and a debt blocks until repaid.
   */
  readonly settles: boolean;
  /** An identity's override (admin API) applies: the script reads it in the decision. */
  readonly readsOverride: boolean;
  /**
   * After an override changes the period, the admin API re-aims the identity's counter at the end of the window
   * now in force (src/admin/reaim.ts): the state's expiry is the window's end.
   */
  readonly reaimsOnOverride: boolean;
  /**
   * The script may answer an allowed single rule with a bare integer (remaining; the window's end left to the
   * edge: src/engine/reply.ts).
   */
  readonly integerReply: boolean;
  /**
   * Its RateLimit member (README "Responses"): `window`, `w` and `t`; `concurrent-requests`,
   * `qu="concurrent-requests"` and no `w`/`t`, and a denial says retry in 1 s (slots free as requests finish);
   * `none`, no member (the origin's budget, not the client's quota).
   */
  readonly rateLimitMember: "window" | "concurrent-requests" | "none";
  /**
   * The most requests one window may let in (its `limit` over the least a request costs), where the state
   * keeps one member per request and a decision may read them all (docs/script.md, "Sliding-log state");
   * `Infinity`: no such cap. More is a configuration error naming the field.
   */
  readonly maxRequestsPerWindow: number;
  /** A denial is the client's `quota` (429), or the origin's `load` (503, shed). */
  readonly denial: "quota" | "load";
  /**
   * Its windows may be calendar periods (`period = "calendar:day|week|month"`, docs/counting.md, "Calendar
   * periods"): the script picks the period by Redis's clock among bounds the edge sends.
   */
  readonly calendarPeriods: boolean;
  /** The algorithm's module: refund pricing, fences, waits (src/engine/algorithms/logic.ts). */
  readonly logic: AlgorithmLogic;
}

/** A window rule's common traits. */
const WINDOW = {
  shape: "window",
  holdsSlot: false,
  storesRequestId: false,
  needsPeriod: true,
  takesBurst: false,
  takesCost: true,
  takesDelay: false,
  takesPriorities: false,
  takesBlock: true,
  leasable: true,
  settles: true,
  readsOverride: true,
  reaimsOnOverride: false,
  integerReply: false,
  rateLimitMember: "window",
  maxRequestsPerWindow: Number.POSITIVE_INFINITY,
  denial: "quota",
  calendarPeriods: false,
} as const;

/** A token bucket's and GCRA's traits: one TAT, the same state (lua/decide/token-bucket.lua). */
const BUCKET = {
  ...WINDOW,
  shape: "bucket",
  takesBurst: true,
  takesDelay: true,
  logic: tokenBucket,
} as const;

/** A concurrency budget's traits: requests in flight. */
const SLOTS = {
  shape: "slots",
  holdsSlot: true,
  storesRequestId: true,
  needsPeriod: false,
  takesBurst: false,
  takesCost: false,
  takesDelay: false,
  takesPriorities: false,
  takesBlock: false,
  leasable: false,
  settles: false,
  readsOverride: true,
  reaimsOnOverride: false,
  integerReply: false,
  rateLimitMember: "concurrent-requests",
  maxRequestsPerWindow: Number.POSITIVE_INFINITY,
  denial: "quota",
  calendarPeriods: false,
  logic: concurrency,
} as const;

/**
 * Every algorithm, by the name a rule's `algorithm` field spells (the rule schema's picklist), in the table's
 * order. A name here without its row below does not compile.
 */
export const ALGORITHMS = [
  "fixed-window",
  "sliding-window",
  "sliding-log",
  "token-bucket",
  "gcra",
  "concurrency",
  "shed",
] as const;

/** An algorithm's name. */
export type Algorithm = (typeof ALGORITHMS)[number];

/** THE table. Codes are the script's: never renumber one (a deployed script reads them). */
export const ALGORITHM_TRAITS: Readonly<Record<Algorithm, AlgorithmTraits>> = {
  "fixed-window": {
    ...WINDOW,
    code: 1,
    reaimsOnOverride: true,
    integerReply: true,
    calendarPeriods: true,
    logic: fixedWindow,
  },
  "sliding-window": { ...WINDOW, code: 2, logic: slidingWindow },
  "sliding-log": {
    ...WINDOW,
    code: 3,
    storesRequestId: true,
    // One member per request: a charge after the response would be a member of its own, outside the cap.
    settles: false,
    maxRequestsPerWindow: MAX_LOG_REQUESTS,
    logic: slidingLog,
  },
  "token-bucket": { ...BUCKET, code: 4 },
  gcra: { ...BUCKET, code: 5 },
  concurrency: { ...SLOTS, code: 6 },
  // Priority load shedding: a concurrency budget whose limit the edge sets per priority class (its share of a
  // sub-key), so an override does not apply, and being shed is the origin's load, not the client's quota.
  shed: {
    ...SLOTS,
    code: 7,
    takesPriorities: true,
    readsOverride: false,
    rateLimitMember: "none",
    denial: "load",
  },
};

/** Whether `name` is an algorithm of the table. */
export const isAlgorithm = (name: unknown): name is Algorithm =>
  typeof name === "string" && Object.hasOwn(ALGORITHM_TRAITS, name);

/** The traits of `algorithm`. */
export const traitsOf = (algorithm: Algorithm): AlgorithmTraits => ALGORITHM_TRAITS[algorithm];

/**
 * The algorithms with `trait` set, as a message names them: "token-bucket and gcra" (the config's errors and
 * warnings, so that they follow the table).
 */
export function namesWith(
  trait: {
    [K in keyof AlgorithmTraits]: AlgorithmTraits[K] extends boolean ? K : never;
  }[keyof AlgorithmTraits],
): string {
  const names = ALGORITHMS.filter((algorithm) => traitsOf(algorithm)[trait]);
  return names.length <= 1 ? (names[0] ?? "no") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
}
