/**
 * Scenarios kept because they once found a bug (a fuzzer's corpus): every profile runs them first, then its
 * random ones. Each reproduces a historical over-admission through the same operations a random scenario
 * uses, timed around a window edge or a refill; docs/exactness.md tells what each caught.
 */
import type { Op, Scenario, SimCall } from "./scenario";

/** One unit of rule 0 for identity 0: the call of the scenarios below that need no other. */
const call = { rule: 0, identity: 0, cost: 1 };

/**
 * A short lease spend at a window edge (b4bfc0d), shaped so that the lease's size does not depend on the
 * machine's speed: isolate 0's burst of 5 at 500 ms makes the identity hot by the lease table's own count (a
 * lease is asked for once 5 requests were seen in a second: `LeaseTable.wanted`), so its fifth request leases
 * 2 units and spends 1, and isolate 0 holds exactly 1 leased unit (counted in the first window) until its
 * lease runs out at the edge. A request of the whole capacity (10) at 850 ms, on a slow way in (250 ms of a
 * 400 ms budget), finds that lease too short: if the lease only had to be live at the send, it spends the unit
 * and sends 9 to Redis, counted in the next window, which a fill then takes to its limit: the request's 10
 * units fit neither window (5 + 10 before the edge, 10 + 1 after it). With the fix, a lease that ends before
 * the answer may come is not spent: the 10 go to Redis whole.
 */
export const LEASE_AT_AN_EDGE: Scenario = {
  rules: [{ algorithm: "fixed-window", limit: 10, periodMs: 1000, burst: 10, delayMs: 0 }],
  isolates: 1,
  endpoints: 1,
  cluster: false,
  leaseMs: 1000,
  timeoutMs: 1000,
  edgeMs: 1000,
  ops: [
    { kind: "burst", at: 20, isolate: 0, call: { rule: 0, identity: 0, cost: 1 }, n: 5 },
    {
      kind: "request",
      at: 600,
      isolate: 0,
      calls: [{ rule: 0, identity: 0, cost: 10 }],
      holdMs: 0,
      fault: { kind: "slow-in", ms: 500 },
    },
    { kind: "fill", at: 1500, call: { rule: 0, identity: 0, cost: 1 } },
  ],
};

/**
 * A split decision's refund to a token bucket that lands late (f8a8578): a request over two identities
 * (slot groups) takes 3 units of a full bucket of 5 and is denied by the other group; its refund reaches
 * Redis 500 ms later, after the bucket refilled and a fill spent the refill. A refund that gives back all of
 * its 300 ms, rather than what is still ahead of now, lets a second fill (at 800 ms: after the refund has
 * landed even on a loaded machine) take the refill twice: 10 units in about 450 ms against a burst of 5 at
 * one unit per 100 ms (9.5).
 */
export const LATE_SPLIT_REFUND: Scenario = {
  rules: [
    { algorithm: "token-bucket", limit: 10, periodMs: 1000, burst: 5, delayMs: 0 },
    { algorithm: "fixed-window", limit: 1, periodMs: 3_600_000, burst: 1, delayMs: 0 },
  ],
  isolates: 1,
  endpoints: 1,
  cluster: true,
  leaseMs: 1000,
  timeoutMs: 200,
  edgeMs: 1000,
  ops: [
    { kind: "request", at: 0, isolate: 0, calls: [{ rule: 1, identity: 1, cost: 1 }], holdMs: 0 },
    { kind: "fault", at: 100, fault: { kind: "slow-in", ms: 500, on: "refund" } },
    {
      kind: "request",
      at: 110,
      isolate: 0,
      calls: [
        { rule: 0, identity: 0, cost: 3 },
        { rule: 1, identity: 1, cost: 1 },
      ],
      holdMs: 0,
    },
    { kind: "fill", at: 450, call: { rule: 0, identity: 0, cost: 1 } },
    { kind: "fill", at: 800, call: { rule: 0, identity: 0, cost: 1 } },
  ],
};

/**
 * Fail-open while Redis is slow (docs/fail-open.md, "Why a burst made decisions time out"), under every
 * algorithm at once: every call of two isolates' bursts meets a slow way in (300 ms against a budget of 200 and
 * a grace of 50), so each isolate's fallback limiter answers, and its breaker opens after five. Each isolate may
 * add at most ⌈10 %⌉ of the limit (1 of 10) to what Redis admitted (here nothing: no answer comes in time), per
 * period as each algorithm counts one. When the fallback gave every isolate the whole limit again (before
 * 87fb3b6), the two let up to 2 × 10 through under each rule.
 */
const EVERY_ALGORITHM = [
  "fixed-window",
  "sliding-window",
  "sliding-log",
  "token-bucket",
  "gcra",
  "concurrency",
] as const;
export const SLOW_FAIL_OPEN: Scenario = {
  rules: EVERY_ALGORITHM.map((algorithm) => ({
    algorithm,
    limit: 10,
    periodMs: algorithm === "concurrency" ? 1000 : 3_600_000,
    burst: 10,
    delayMs: 0,
    failure: "open" as const,
  })),
  isolates: 2,
  endpoints: 1,
  cluster: false,
  leaseMs: 1000,
  timeoutMs: 200,
  edgeMs: 1000,
  ops: [
    { kind: "fault", at: 0, fault: { kind: "slow-in", ms: 300 }, times: 40 },
    ...EVERY_ALGORITHM.flatMap((_, rule) =>
      [0, 1].map((isolate): Scenario["ops"][number] => ({
        kind: "burst",
        at: 10,
        isolate,
        call: { rule, identity: 0, cost: 1 },
        n: 12,
      })),
    ),
  ],
};

/**
 * Counting by status (docs/counting.md), met by every profile rather than by one random rule in ten: a login
 * rule of 5 an hour that counts only 4xx, two isolates. A burst of successes gives each one's unit back once its
 * status is known (so more than 5 pass, each given back after its response); a burst of failures is counted, 5
 * at most; a fill takes what is left. No fault, one window: the counter must end at exactly the units counted.
 */
export const COUNT_BY_STATUS: Scenario = {
  rules: [{ algorithm: "fixed-window", limit: 5, periodMs: 3_600_000, burst: 5, delayMs: 0, count: true }],
  isolates: 2,
  endpoints: 1,
  cluster: false,
  leaseMs: 200,
  timeoutMs: 1000,
  edgeMs: 1000,
  ops: [
    { kind: "burst", at: 0, isolate: 0, call, n: 8, answer: { status: 200, spent: 1 } },
    { kind: "burst", at: 10, isolate: 1, call, n: 8, answer: { status: 401, spent: 1 } },
    { kind: "request", at: 60, isolate: 0, calls: [call], holdMs: 50, answer: { status: 503, spent: 1 } },
    { kind: "fill", at: 200, call },
  ],
};

/**
 * A settled bucket with a delay (docs/settle.md, "Debt"), as SIM_SEED=283814960 met it (a model error then,
 * 7facff7): a GCRA of 22 per 250 ms (11.4 ms a unit), burst 4, holding up to 300 ms, whose responses state
 * twice the reservation. The first four pass at once and each charges one more unit as it ends; the next are
 * held for slots reserved when they were decided, and charges land between a held request's decision and its
 * slot: debt the next decision sees. A second isolate's held clients go away (give-backs) or are answered
 * with less than reserved (a settlement that gives back); a fill after the debt takes what is left.
 */
export const SETTLED_DELAY: Scenario = {
  rules: [{ algorithm: "gcra", limit: 22, periodMs: 250, burst: 4, delayMs: 300, settle: true }],
  isolates: 2,
  endpoints: 1,
  cluster: false,
  leaseMs: 200,
  timeoutMs: 1000,
  edgeMs: 1000,
  ops: [
    { kind: "burst", at: 0, isolate: 0, call, n: 8, answer: { status: 200, spent: 2 } },
    { kind: "burst", at: 5, isolate: 1, call, n: 6, abortAfterMs: 20, answer: { status: 200, spent: 0 } },
    { kind: "burst", at: 150, isolate: 1, call, n: 4, answer: { status: 200, spent: 0 } },
    { kind: "fill", at: 400, call },
  ],
};

/**
 * The penalty box (docs/protect.md, "Penalty box"): a token bucket of 10 a second, burst 3, that blocks for
 * 800 ms. A burst of 5 is denied at its fourth, which starts the block; the bucket refills a unit every 100 ms,
 * so each later request inside the block (on either isolate, and a fill through a third) would pass by the rate
 * alone, and the block must deny it. After the block the rate decides again.
 */
export const PENALTY_BOX: Scenario = {
  rules: [{ algorithm: "token-bucket", limit: 10, periodMs: 1000, burst: 3, delayMs: 0, blockMs: 800 }],
  isolates: 2,
  endpoints: 1,
  cluster: false,
  leaseMs: 200,
  timeoutMs: 1000,
  edgeMs: 1000,
  ops: [
    { kind: "burst", at: 0, isolate: 0, call, n: 5 },
    ...[200, 350, 500, 650].map((at, i): Scenario["ops"][number] => ({
      kind: "request",
      at,
      isolate: i % 2,
      calls: [call],
      holdMs: 0,
    })),
    { kind: "fill", at: 420, call },
    { kind: "request", at: 1000, isolate: 1, calls: [call], holdMs: 0 },
  ],
};

/**
 * Priority load shedding (docs/algorithms.md, "Priority load shedding"): a budget of 6 in flight on one
 * sub-key, classes PUT (share 1) and POST (0.5, the lowest: an unlisted method gets it). Three low requests
 * take slots held 600 ms and the next two are shed (3 of ⌊6 × 0.5⌋ in flight), as are two of no class; high
 * ones still get the other 3 and the next two are shed (6 in flight); once the slots are released, low ones
 * pass again. A shed rule that let a low class past its share, or shed a high one below the full budget, fails it.
 */
const low = { rule: 0, identity: 0, cost: 1, priority: 1 };
const high = { ...low, priority: 0 };
const shedRequest = (at: number, isolate: number, c: SimCall, holdMs: number): Op => ({
  kind: "request",
  at,
  isolate,
  calls: [c],
  holdMs,
});
export const SHED_PRIORITIES: Scenario = {
  rules: [
    {
      algorithm: "shed",
      limit: 6,
      periodMs: 1000,
      burst: 6,
      delayMs: 0,
      shed: { shares: [1, 0.5], shards: 1 },
    },
  ],
  isolates: 2,
  endpoints: 1,
  cluster: false,
  leaseMs: 200,
  timeoutMs: 1000,
  edgeMs: 1000,
  // Requests 40 ms apart rather than bursts: each is then certainly decided after the one before it (a burst's
  // next request may go out in the millisecond its last reply came, which the model cannot order).
  ops: [
    ...[0, 40, 80, 120, 160].map((at) => shedRequest(at, 0, low, 600)),
    ...[200, 240].map((at) => shedRequest(at, 1, { ...low, priority: undefined }, 500)),
    ...[280, 320, 360, 400, 440].map((at) => shedRequest(at, 1, high, 300)),
    { kind: "burst", at: 1000, isolate: 0, call: low, n: 4 },
  ],
};

/**
 * Live deny and allow lists (docs/lists.md): a `deny` rule on list l0 before every counting rule, an `allow`
 * rule on list l1 before the second, two isolates reading the live modes every 200 ms. Identity 0's address is
 * added to l0 through isolate 0 (refused everywhere once each copy has it), then a CIDR holding both
 * identities to l1 through isolate 1 (the second rule no longer counts them), then identity 0 is removed from
 * l0 (let through again, once each copy has the removal: applied from the list's change log). Requests from both
 * identities through both isolates before, between and after the writes; at the end every copy has the last
 * write.
 */
const both = (identity: number): SimCall[] => [
  { rule: 0, identity, cost: 1 },
  { rule: 1, identity, cost: 1 },
];
export const LIVE_LISTS: Scenario = {
  rules: [
    { algorithm: "fixed-window", limit: 50, periodMs: 3_600_000, burst: 50, delayMs: 0 },
    { algorithm: "fixed-window", limit: 50, periodMs: 3_600_000, burst: 50, delayMs: 0 },
  ],
  actions: [
    { action: "deny", list: 0, before: 0 },
    { action: "allow", list: 1, before: 1 },
  ],
  liveRefreshMs: 200,
  isolates: 2,
  endpoints: 1,
  cluster: false,
  leaseMs: 200,
  timeoutMs: 1000,
  edgeMs: 1000,
  ops: [
    { kind: "list", at: 50, isolate: 0, list: 0, add: ["ip0"], remove: [] },
    { kind: "list", at: 500, isolate: 1, list: 1, add: ["net"], remove: [] },
    { kind: "list", at: 800, isolate: 0, list: 0, add: [], remove: ["ip0"] },
    ...[0, 100, 200, 300, 400, 450, 550, 650, 750, 850, 950, 1050, 1150].flatMap((at, i): Op[] =>
      [0, 1].map((identity) => ({
        kind: "request",
        at: at + identity * 20,
        isolate: (i + identity) % 2,
        calls: both(identity),
        holdMs: 0,
      })),
    ),
  ],
};

/** The corpus, each scenario run `CORPUS_REPEATS` times (their bugs show at a timing each run hits most often). */
export const CORPUS: readonly Scenario[] = [
  LEASE_AT_AN_EDGE,
  LATE_SPLIT_REFUND,
  SLOW_FAIL_OPEN,
  COUNT_BY_STATUS,
  SETTLED_DELAY,
  PENALTY_BOX,
  SHED_PRIORITIES,
  LIVE_LISTS,
];
export const CORPUS_REPEATS = 2;
/**
 * Scenarios that meet a mechanism every run rather than a bug at one timing: each runs once, beside the random
 * runs of the lanes (one lane each), not alone first, which keeps the fast profile's time.
 */
export const ALONGSIDE: ReadonlySet<Scenario> = new Set([
  COUNT_BY_STATUS,
  SETTLED_DELAY,
  PENALTY_BOX,
  SHED_PRIORITIES,
  LIVE_LISTS,
]);

/** Runs of a scenario, where not `CORPUS_REPEATS`. */
export const REPEATS: ReadonlyMap<Scenario, number> = new Map([...ALONGSIDE].map((s) => [s, 1]));

/**
 * Run once by every lane before anything else, unchecked: a lane's first run is a cold one (each script's
 * first call loads it, the code paths are not warm yet), and runs late by tens of ms, enough to miss the
 * timings the corpus's bugs need. Decisions, lease calls, a split decision's refund and a bucket's.
 */
export const WARM_UP: Scenario = {
  rules: [
    { algorithm: "fixed-window", limit: 10, periodMs: 3_600_000, burst: 10, delayMs: 0 },
    { algorithm: "token-bucket", limit: 10, periodMs: 1000, burst: 5, delayMs: 0 },
  ],
  isolates: 1,
  endpoints: 1,
  cluster: true,
  leaseMs: 200,
  timeoutMs: 2000,
  edgeMs: 1000,
  ops: [
    { kind: "burst", at: -1000, isolate: 0, call: { rule: 0, identity: 0, cost: 1 }, n: 6 },
    { kind: "fill", at: -900, call: { rule: 0, identity: 1, cost: 1 } },
    {
      kind: "request",
      at: -800,
      isolate: 0,
      calls: [
        { rule: 1, identity: 0, cost: 2 },
        { rule: 0, identity: 1, cost: 1 },
      ],
      holdMs: 0,
    },
  ],
};
