/**
 * Random scenarios of the regional system (test/sim/regions.ts), as fast-check arbitraries: short periods and
 * short region leases, so that window edges, refills and pool expiries fall inside a run of a second or two;
 * bursts that give a region a pace (then pools, renewals); identities moving between regions; admin changes that
 * other isolates hear of late; faults on every database's way; a region's database killed and restarted; the
 * primary frozen. And the race an adversarial review found by hand (a grant in flight across an admin reset).
 */
import fc from "fast-check";
import type { Fault } from "./network";
import type { RegionOp, RegionRule, RegionScenario } from "./regions-types";

/** How big a scenario gets: the fast profile's, or the long run's. */
export interface RegionSize {
  maxOps: number;
  /** The latest an operation starts, ms after the first edge. */
  spanMs: number;
}

export const FAST: RegionSize = { maxOps: 16, spanMs: 1500 };
export const LONG: RegionSize = { maxOps: 40, spanMs: 3000 };

/** Most isolates a scenario has. */
const MAX_ISOLATES = 4;

const rule: fc.Arbitrary<RegionRule> = fc
  .record({
    algorithm: fc.constantFrom(
      "fixed-window",
      "fixed-window",
      "sliding-window",
      "sliding-log",
      "token-bucket",
      "gcra",
    ) as fc.Arbitrary<RegionRule["algorithm"]>,
    limit: fc.oneof(fc.integer({ min: 4, max: 16 }), fc.integer({ min: 30, max: 120 })),
    periodMs: fc.constantFrom(1000, 2000, 4000),
    burstShare: fc.double({ min: 0.2, max: 1, noNaN: true }),
    // One rule in eight is never leased: a request matching it goes to the primary whole.
    lease: fc.integer({ min: 0, max: 7 }).map((n) => n !== 0),
  })
  .map(({ algorithm, limit, periodMs, burstShare, lease }) => {
    const bucket = algorithm === "token-bucket" || algorithm === "gcra";
    return {
      algorithm,
      limit,
      periodMs,
      burst: bucket ? Math.max(1, Math.round(limit * burstShare)) : limit,
      ...(!lease && { lease: false }),
    };
  });

/** A fault on the primary's lease call: a slow way in or out (the grant lands late), an error, a lost reply. */
const leaseFault: fc.Arbitrary<Fault> = fc.oneof(
  fc.record({ kind: fc.constant("slow-out" as const), ms: fc.integer({ min: 50, max: 500 }) }),
  fc.record({ kind: fc.constant("slow-in" as const), ms: fc.integer({ min: 50, max: 500 }) }),
  fc.record({ kind: fc.constantFrom("error" as const, "lost" as const) }),
);

/** Weights of the operation kinds, drawn per scenario. */
interface Mix {
  request: number;
  burst: number;
  reset: number;
  override: number;
  fault: number;
  restart: number;
  freeze: number;
  race: number;
}

const mix: fc.Arbitrary<Mix> = fc
  .record({
    request: fc.constantFrom(1, 4),
    burst: fc.constantFrom(1, 3),
    reset: fc.constantFrom(0, 1, 2),
    override: fc.constantFrom(0, 1, 2),
    fault: fc.constantFrom(0, 1, 2),
    restart: fc.constantFrom(0, 0, 1),
    freeze: fc.constantFrom(0, 0, 1),
    race: fc.constantFrom(0, 1, 2),
  })
  .map((m) => m);

function ops(
  rules: RegionRule[],
  isolates: number,
  leaseMs: number,
  size: RegionSize,
  edgeMs: number,
  weights: Mix,
): fc.Arbitrary<RegionOp[]> {
  const edges = Math.max(0, Math.floor(size.spanMs / edgeMs));
  const at = fc.oneof(
    fc.integer({ min: 0, max: size.spanMs }),
    fc
      .tuple(fc.integer({ min: 0, max: edges }), fc.integer({ min: -80, max: 40 }))
      .map(([k, d]) => Math.max(0, k * edgeMs + d)),
  );
  const isolate = fc.integer({ min: 0, max: isolates - 1 });
  const ruleIndex = fc.integer({ min: 0, max: rules.length - 1 });
  const identity = fc.constantFrom(0, 0, 0, 1, 2);
  const call = (r: number) => {
    const { algorithm, limit, burst } = rules[r] as RegionRule;
    const capacity = algorithm === "token-bucket" || algorithm === "gcra" ? burst : limit;
    return fc.record({
      rule: fc.constant(r),
      identity,
      cost: fc.oneof(
        { arbitrary: fc.integer({ min: 1, max: Math.min(3, capacity) }), weight: 4 },
        { arbitrary: fc.integer({ min: 1, max: capacity }), weight: 1 },
      ),
    });
  };
  const lags = fc.array(fc.integer({ min: 0, max: 600 }), { minLength: isolates, maxLength: isolates });
  const request = fc.record(
    {
      kind: fc.constant("request" as const),
      at,
      isolate,
      calls: fc
        .uniqueArray(ruleIndex, { minLength: 1, maxLength: 2 })
        .chain((picked) => fc.tuple(...picked.map(call))),
      noRegion: fc.integer({ min: 0, max: 9 }).map((n) => n === 0),
      fault: fc.option(leaseFault, { nil: undefined, freq: 4 }),
    },
    { requiredKeys: ["kind", "at", "isolate", "calls"] },
  );
  const burst = fc.record({
    kind: fc.constant("burst" as const),
    at,
    isolate,
    call: ruleIndex.chain(call).map((c) => ({ ...c, cost: 1 })),
    n: fc.integer({ min: 3, max: 40 }),
  });
  const reset = fc.record({
    kind: fc.constant("reset" as const),
    at,
    admin: isolate,
    rule: ruleIndex,
    identity,
    lagMs: lags,
  });
  const override = fc.record(
    {
      kind: fc.constant("override" as const),
      at,
      admin: isolate,
      rule: ruleIndex,
      identity,
      // Absent: the override's removal. Limits below and above the rule's.
      set: fc.option(
        fc.record(
          {
            limit: fc.oneof(fc.integer({ min: 1, max: 8 }), fc.integer({ min: 20, max: 150 })),
            periodS: fc.constantFrom(1, 2),
            burst: fc.integer({ min: 1, max: 40 }),
            ttlS: fc.constantFrom(1, 2),
          },
          { requiredKeys: ["limit"] },
        ),
        { nil: undefined, freq: 3 },
      ),
      lagMs: lags,
    },
    { requiredKeys: ["kind", "at", "admin", "rule", "identity", "lagMs"] },
  );
  const way = fc.oneof(fc.constant("primary" as const), fc.integer({ min: 0, max: 2 }));
  const faultOp = fc.record({
    kind: fc.constant("fault" as const),
    at,
    way,
    fault: fc.oneof(
      fc.record({
        kind: fc.constantFrom("slow-in" as const, "slow-out" as const),
        ms: fc.integer({ min: 20, max: 400 }),
      }),
      fc.record({ kind: fc.constantFrom("error" as const, "lost" as const) }),
    ),
    times: fc.constantFrom(1, 1, 3, 8),
  });
  const restart = fc.record({
    kind: fc.constant("restart" as const),
    at,
    region: fc.integer({ min: 0, max: 2 }),
    downMs: fc.integer({ min: 0, max: 300 }),
  });
  const freeze = fc.record({
    kind: fc.constant("freeze" as const),
    at,
    downMs: fc.integer({ min: 100, max: 600 }),
  });
  // The race: a burst that gives a region a pace, and once its pool has expired, a request there whose lease
  // call (asking for units at that pace) is slow on its way back; an admin change through another isolate while
  // it is out, the asking isolate hearing of it only after the grant is back; then a burst in the asking region
  // larger than the (rule, identity)'s capacity (what regions-adversarial.test.ts does by hand).
  const race: fc.Arbitrary<RegionOp[]> = fc
    .record({
      at,
      asking: isolate,
      admin: fc.integer({ min: 1, max: Math.max(1, isolates - 1) }),
      call: ruleIndex.chain(call),
      slowMs: fc.integer({ min: 150, max: 500 }),
      changeAfterMs: fc.integer({ min: 20, max: 140 }),
      hearsLateMs: fc.integer({ min: 0, max: 1000 }),
      override: fc.boolean(),
    })
    .map((r): RegionOp[] => {
      const rule = rules[r.call.rule] as RegionRule;
      const capacity =
        rule.algorithm === "token-bucket" || rule.algorithm === "gcra" ? rule.burst : rule.limit;
      const admin = (r.asking + r.admin) % isolates;
      const lagMs = Array.from({ length: isolates }, (_, k) =>
        k === r.asking ? r.slowMs + r.hearsLateMs : 0,
      );
      const asksAt = r.at + leaseMs + 150;
      const changeAt = asksAt + r.changeAfterMs;
      const { rule: ruleOf, identity: id } = r.call;
      const one = { ...r.call, cost: 1 };
      return [
        { kind: "burst", at: r.at, isolate: r.asking, call: one, n: 4 },
        {
          kind: "request",
          at: asksAt,
          isolate: r.asking,
          calls: [r.call],
          fault: { kind: "slow-out", ms: r.slowMs },
        },
        r.override
          ? {
              kind: "override",
              at: changeAt,
              admin,
              rule: ruleOf,
              identity: id,
              set: { limit: Math.max(1, Math.floor(rule.limit / 2)) },
              lagMs,
            }
          : { kind: "reset", at: changeAt, admin, rule: ruleOf, identity: id, lagMs },
        {
          kind: "burst",
          at: asksAt + r.slowMs + 60,
          isolate: r.asking,
          call: one,
          n: Math.min(150, capacity + 20),
        },
      ];
    });
  const one = <T extends RegionOp>(op: fc.Arbitrary<T>) => op.map((o): RegionOp[] => [o]);
  const kinds = [
    { arbitrary: one(request), weight: weights.request },
    { arbitrary: one(burst), weight: weights.burst },
    { arbitrary: one(reset), weight: weights.reset },
    { arbitrary: one(override), weight: weights.override },
    { arbitrary: one(faultOp), weight: weights.fault },
    { arbitrary: one(restart), weight: weights.restart },
    { arbitrary: one(freeze), weight: weights.freeze },
    { arbitrary: race, weight: weights.race },
  ].filter((k) => k.weight > 0);
  return fc
    .array(fc.oneof(...kinds), { minLength: 1, maxLength: size.maxOps })
    .map((chains) => chains.flat().slice(0, size.maxOps + 2));
}

/** A random scenario of `size`. */
export function regionScenario(size: RegionSize): fc.Arbitrary<RegionScenario> {
  return fc
    .record({
      rules: fc.array(rule, { minLength: 1, maxLength: 2 }),
      regions: fc.constantFrom(2, 2, 3),
      isolates: fc.integer({ min: 2, max: MAX_ISOLATES }),
      leaseMs: fc.constantFrom(300, 700, 1200),
      weights: mix,
    })
    .chain(({ rules, regions, isolates, leaseMs, weights }) => {
      // Every second: an edge of each window (they are aligned to the epoch) falls on one, and a run waits for
      // at most a second before it starts.
      const edgeMs = 1000;
      return ops(rules, isolates, leaseMs, size, edgeMs, weights).map(
        (list): RegionScenario => ({
          rules,
          regions,
          isolates,
          leaseMs,
          timeoutMs: 1000,
          edgeMs,
          ops: list,
        }),
      );
    });
}

/**
 * The grant in flight across an admin reset (4cb0786): isolate 0 (region g0) misses on a fixed window of 100 per
 * 2 s, first sight, and asks the primary for the request and 12 units for g0 (a quarter of what the limit allows
 * over the 1 s lease); the answer is held 300 ms on its way back. At 150 ms isolate 1 (region g1) resets the
 * identity: the primary's count goes, and isolate 1 drops the pools in both regions; isolate 0 hears of it only
 * 1.5 s later. The grant comes back at about 350 ms: without the drop mark, its 12 units go into g0's pool, and
 * isolate 2's burst in g0 from 400 ms spends them on top of the 100 the fresh window allows (112 in one window).
 */
export const GRANT_ACROSS_A_RESET: RegionScenario = {
  rules: [{ algorithm: "fixed-window", limit: 100, periodMs: 2000, burst: 100 }],
  regions: 2,
  isolates: 3,
  leaseMs: 1000,
  timeoutMs: 1000,
  edgeMs: 2000,
  ops: [
    {
      kind: "request",
      at: 50,
      isolate: 0,
      calls: [{ rule: 0, identity: 0, cost: 1 }],
      fault: { kind: "slow-out", ms: 300 },
    },
    { kind: "reset", at: 150, admin: 1, rule: 0, identity: 0, lagMs: [1500, 0, 0, 0] },
    { kind: "burst", at: 400, isolate: 2, call: { rule: 0, identity: 0, cost: 1 }, n: 130 },
  ],
};

/**
 * A lane's first run, unchecked: the scripts loaded into the lane's databases (a script's first call answers
 * NOSCRIPT and is sent again, which would move the corpus's timing) and the code warm.
 */
export const WARM_UP: RegionScenario = {
  rules: [{ algorithm: "token-bucket", limit: 20, periodMs: 1000, burst: 20 }],
  regions: 3,
  isolates: 3,
  leaseMs: 300,
  timeoutMs: 2000,
  edgeMs: 1,
  ops: [
    { kind: "burst", at: 0, isolate: 0, call: { rule: 0, identity: 0, cost: 1 }, n: 8 },
    { kind: "burst", at: 0, isolate: 1, call: { rule: 0, identity: 0, cost: 1 }, n: 8 },
    { kind: "burst", at: 0, isolate: 2, call: { rule: 0, identity: 0, cost: 1 }, n: 8 },
    { kind: "request", at: 0, isolate: 0, calls: [{ rule: 0, identity: 1, cost: 1 }], noRegion: true },
    { kind: "reset", at: 150, admin: 0, rule: 0, identity: 0, lagMs: [0, 0, 0, 0] },
    { kind: "override", at: 200, admin: 1, rule: 0, identity: 0, set: { limit: 5 }, lagMs: [0, 0, 0, 0] },
    { kind: "override", at: 250, admin: 2, rule: 0, identity: 0, lagMs: [0, 0, 0, 0] },
  ],
};

/**
 * The same race with region g0's database killed and restarted empty after the reset's drop, and the asking
 * isolate hearing of the reset at once (ef8ec9a): the fresh database has no drop mark, so only the isolate's own
 * guard (a grant sent before a change it has heard of is never deposited) keeps the old grant's 18 units (a
 * quarter of what 100 per 2 s allows over a 1.5 s lease) out of g0's pool: 118 in one window without it.
 */
export const GRANT_ACROSS_A_RESET_AND_A_RESTART: RegionScenario = {
  ...GRANT_ACROSS_A_RESET,
  leaseMs: 1500,
  ops: [
    {
      kind: "request",
      at: 50,
      isolate: 0,
      calls: [{ rule: 0, identity: 0, cost: 1 }],
      fault: { kind: "slow-out", ms: 700 },
    },
    { kind: "reset", at: 150, admin: 1, rule: 0, identity: 0, lagMs: [0, 0, 0] },
    { kind: "restart", at: 300, region: 0, downMs: 0 },
    { kind: "burst", at: 900, isolate: 2, call: { rule: 0, identity: 0, cost: 1 }, n: 140 },
  ],
};

/**
 * A hole the simulator found (docs/exactness.md, "Regional pools"): the race above, with region g0's database
 * killed and restarted empty between the reset's drop (which marked it) and the grant's landing. The fresh
 * database has no drop mark and the asking isolate has not heard of the reset yet: the old grant's 12 units went
 * into g0's pool, 112 in one window of 100. Closed by the pace record's since (lua/region-deposit.lua): the
 * fresh database holds no record from before the ask, so the grant is refused.
 */
export const RESTART_AFTER_A_DROP: RegionScenario = {
  ...GRANT_ACROSS_A_RESET,
  ops: [
    {
      kind: "request",
      at: 50,
      isolate: 0,
      calls: [{ rule: 0, identity: 0, cost: 1 }],
      fault: { kind: "slow-out", ms: 600 },
    },
    { kind: "reset", at: 150, admin: 1, rule: 0, identity: 0, lagMs: [1500, 0, 0] },
    { kind: "restart", at: 300, region: 0, downMs: 20 },
    { kind: "burst", at: 800, isolate: 2, call: { rule: 0, identity: 0, cost: 1 }, n: 130 },
  ],
};

/** Scenarios every profile runs first (a fuzzer's corpus). */
export const CORPUS: readonly RegionScenario[] = [
  GRANT_ACROSS_A_RESET,
  GRANT_ACROSS_A_RESET_AND_A_RESTART,
  RESTART_AFTER_A_DROP,
];

/** Scenarios by name, for `SIM_SCENARIO=<name>` (test/node/simulation-regions.test.ts). */
export const NAMED: Readonly<Record<string, RegionScenario>> = {
  "grant-across-a-reset": GRANT_ACROSS_A_RESET,
  "grant-across-a-reset-and-a-restart": GRANT_ACROSS_A_RESET_AND_A_RESTART,
  "restart-after-a-drop": RESTART_AFTER_A_DROP,
};
