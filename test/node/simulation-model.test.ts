// The simulator's model (test/sim/model.ts) on histories written by hand: it must flag every over-admission no
// choice of instants explains, and never one that some choice does (docs/exactness.md, "The model").
import { describe, expect, it } from "vitest";
import { checkBlocks, checkLedger, checkResponses } from "../sim/after-response";
import { type Admission, checkHistory, floorOf, type Limits } from "../sim/model";
import { checkFallbacks } from "../sim/fail-open";
import { type Change, epochsOf, inEffect, type Scenario } from "../sim/system";

let op = 0;
/** An admission of `units` somewhere in [from, to] ms. */
const at = (units: number, from: number, to = from): Admission => ({ units, at: { from, to }, op: op++ });

describe("fixed-window", () => {
  const l: Limits = { algorithm: "fixed-window", limit: 10, periodMs: 1000, burst: 10 };

  it("flags 11 units certainly inside one window, and passes 10", () => {
    expect(checkHistory(l, [at(5, 100), at(5, 900)])).toEqual([]);
    expect(checkHistory(l, [at(5, 100), at(6, 900)])).toHaveLength(1);
  });

  it("places a request straddling an edge wholly in the window where it fits", () => {
    // 8 before the edge, 5 across it, 5 after: the 5 fit after it (5 + 5), not before (8 + 5).
    expect(checkHistory(l, [at(8, 100), at(5, 990, 1010), at(5, 1500)])).toEqual([]);
    // 6 after: fits neither side whole (8 + 5 before, 5 + 6 after), though 2 + 3 units would.
    expect(checkHistory(l, [at(8, 100), at(5, 990, 1010), at(6, 1500)])).toHaveLength(1);
  });
});

describe("sliding-window", () => {
  const l: Limits = { algorithm: "sliding-window", limit: 10, periodMs: 1000, burst: 10 };

  it("weighs the previous window by what is still in view", () => {
    // 10 in window 0; at 1500 half of it is in view: 5 more fit, 6 do not.
    expect(checkHistory(l, [at(10, 500), at(5, 1500)])).toEqual([]);
    expect(checkHistory(l, [at(10, 500), at(6, 1500)])).toHaveLength(1);
  });
});

describe("sliding-log", () => {
  const l: Limits = { algorithm: "sliding-log", limit: 3, periodMs: 1000, burst: 3 };

  it("counts any period, not epoch-aligned windows", () => {
    expect(checkHistory(l, [at(1, 100), at(1, 600), at(1, 1050), at(1, 1200)])).toEqual([]);
    // Four within (200, 1200]: the last one is one too many.
    expect(checkHistory(l, [at(1, 700), at(1, 900), at(1, 1050), at(1, 1200)])).toHaveLength(1);
  });
});

describe("token-bucket", () => {
  // 10 a second: one unit per 100 ms, a burst of 5.
  const l: Limits = { algorithm: "token-bucket", limit: 10, periodMs: 1000, burst: 5 };

  it("allows the burst, then the refill, and no more", () => {
    expect(checkHistory(l, [at(5, 0), at(1, 100), at(1, 200)])).toEqual([]);
    expect(checkHistory(l, [at(5, 0), at(2, 100)])).toHaveLength(1);
  });

  it("an admission's whole interval counts toward its span: uncertainty only ever excuses", () => {
    // Read as points 60 ms apart, 6 units break 5 + 0.6; but they may lie 100 ms apart: 5 + 1.
    expect(checkHistory(l, [at(5, 0, 100), at(1, 60, 100)])).toEqual([]);
    expect(checkHistory(l, [at(5, 0), at(1, 60)])).toHaveLength(1);
  });
});

describe("concurrency", () => {
  const l: Limits = { algorithm: "concurrency", limit: 2, periodMs: 1000, burst: 2 };

  it("counts slots held at once, not those released or expired", () => {
    const released = { ...at(1, 0), releasedFrom: 50 };
    expect(checkHistory(l, [released, at(1, 10), at(1, 100)])).toEqual([]);
    expect(checkHistory(l, [at(1, 0), at(1, 10), at(1, 100)])).toHaveLength(1);
    expect(checkHistory(l, [at(1, 0), at(1, 10), at(1, 1100)])).toEqual([]); // the first two expired
  });
});

describe("admin changes as they took effect (inEffect)", () => {
  const override = (from: number, limit: number) =>
    ({ from, to: from + 20, kind: "override", limits: { ...own, limit } }) as const;
  const own: Limits = { algorithm: "fixed-window", limit: 4, periodMs: 400, burst: 4 };

  it("an override's ttl ends it only if no later set replaced it first", () => {
    // Found by the long profile: a 1 s override replaced by a 2 s one at 207 ms; the first's ttl end at
    // 1000 ms was taken for the rule's own limits (4) while the second's (11) stood: "9 units > limit 4".
    const first = override(0, 31);
    const second = override(207, 11);
    const changes = inEffect([
      first,
      { from: 1000, to: 1020, limits: "own", kind: "ttl", ends: first },
      second,
      { from: 2207, to: 2227, limits: "own", kind: "ttl", ends: second },
    ]);
    expect(changes.map((c) => (typeof c.limits === "object" ? c.limits.limit : c.limits))).toEqual([
      31,
      11,
      "own",
    ]);
  });

  it("a set racing the ttl's end, or another set, leaves the limits unknown", () => {
    const first = override(0, 31);
    const changes = inEffect([
      first,
      { from: 1000, to: 1020, limits: "own", kind: "ttl", ends: first },
      override(1010, 11),
    ]);
    expect(changes.map((c) => (typeof c.limits === "object" ? c.limits.limit : c.limits))).toEqual([
      31,
      "unknown",
      11,
    ]);
    expect(inEffect([override(0, 31), override(10, 11)]).map((c) => c.limits)).toEqual([
      "unknown",
      "unknown",
    ]);
  });
});

describe("epochs between admin changes (epochsOf)", () => {
  /** Every violation of each epoch's history under its limits, as the simulator checks them. */
  const violations = (own: Limits, changes: Change[], history: Admission[]) =>
    epochsOf(own, changes, history).flatMap((e) =>
      e.limits === "unknown" ? [] : checkHistory(e.limits, e.history),
    );

  it("an epoch starts once every change before it has landed, not only the last one to start", () => {
    // Found by a long run (a sliding window of 5 an hour after a 2 s override's ttl ended: "prev 0 + cur 5 +
    // 1 > limit 5"): a reset slow on its way (1900..2300 ms) around the ttl's end (2000..2020 ms). The epoch
    // after both began at the ttl's end, so it held 5 units let through before the reset landed (at 2280 ms,
    // say: it deleted the window's count) and 1 after it: 6 of 5, though Redis counted 5, then 1.
    const own: Limits = { algorithm: "sliding-window", limit: 5, periodMs: 3_600_000, burst: 5 };
    const set: Change = { from: 0, to: 20, kind: "override", limits: { ...own, limit: 31 } };
    const changes: Change[] = [
      set,
      { from: 1900, to: 2300, kind: "reset", limits: "same" },
      { from: 2000, to: 2020, kind: "ttl", limits: "own", ends: set },
    ];
    const history = [at(1, 2100), at(1, 2120), at(1, 2140), at(1, 2160), at(1, 2180), at(1, 2400)];
    expect(violations(own, changes, history)).toEqual([]);
    expect(epochsOf(own, changes, history).at(-1)).toMatchObject({ from: 2300, limits: own });
    // The same 6 units once both changes had certainly landed are one too many.
    expect(
      violations(
        own,
        changes,
        history.map((a) => ({ ...a, at: { from: a.at.from + 300, to: a.at.to + 300 } })),
      ),
    ).toHaveLength(1);
  });

  it("an override set racing a reset: the override's limits from the later end of the two", () => {
    // Seed 934353230 path 4 of a long run: a token bucket's override (2 an hour, burst 4) set at the same
    // moment as a reset ("5 units in 44 ms > 4.00"). Between the reset's end and the override's, the fresh
    // bucket may still have run under the rule's own limits.
    const own: Limits = { algorithm: "token-bucket", limit: 10, periodMs: 1000, burst: 5 };
    const o: Limits = { algorithm: "token-bucket", limit: 2, periodMs: 3_600_000, burst: 4 };
    const changes: Change[] = [
      { from: 100, to: 160, kind: "override", limits: o },
      { from: 105, to: 120, kind: "reset", limits: "same" },
    ];
    const history = [at(5, 125), at(1, 150, 151), at(2, 200)];
    expect(epochsOf(own, changes, history).at(-1)).toMatchObject({ from: 160, limits: o });
    expect(violations(own, changes, history)).toEqual([]);
    expect(violations(own, changes, [at(3, 170), at(2, 200)])).toHaveLength(1);
  });
});

describe("the fail-open bound, under every algorithm (checkFallbacks)", () => {
  const ALGORITHMS = [
    "fixed-window",
    "sliding-window",
    "sliding-log",
    "token-bucket",
    "gcra",
    "concurrency",
  ] as const;
  /** One rule of `algorithm`, limit 10 an hour (concurrency: 10 slots of a 1 h lease), failing open. */
  const scenarioOf = (algorithm: Limits["algorithm"]): Scenario => ({
    rules: [{ algorithm, limit: 10, periodMs: 3_600_000, burst: 10, delayMs: 0, failure: "open" }],
    isolates: 2,
    endpoints: 1,
    cluster: false,
    leaseMs: 1000,
    timeoutMs: 200,
    edgeMs: 1000,
    ops: [],
  });
  const KEY = "r0 sim-identity-0________";
  /** Redis admits the whole limit at 100 ms; then isolates' fallbacks admit `perIsolate[k]` units each. */
  const violations = (algorithm: Limits["algorithm"], perIsolate: number[]) => {
    const redis = Array.from({ length: 10 }, (_, i) => at(1, 100 + i));
    const fell = perIsolate.flatMap((n, isolate) =>
      Array.from({ length: n }, (_, i) => ({ ...at(1, 500 + 10 * isolate + i), isolate })),
    );
    return checkFallbacks(scenarioOf(algorithm), new Map([[KEY, redis]]), new Map([[KEY, fell]]), new Map());
  };

  it.each(ALGORITHMS)("%s: the limit + ⌈10 %%⌉ per isolate that fell back, and not one more", (algorithm) => {
    expect(violations(algorithm, [1, 1])).toEqual([]);
    const found = violations(algorithm, [2, 1]);
    expect(found.length).toBeGreaterThan(0);
    expect(found[0]?.invariant).toMatch(/^fail-open: .* \+ 2 isolate\(s\) × 1 \(Redis slow\)$/);
  });

  it("a bucket's bound is per period: a later period's share is not counted against the first's", () => {
    const s: Scenario = { ...scenarioOf("token-bucket") };
    s.rules = [{ ...(s.rules[0] as Scenario["rules"][number]), periodMs: 1000 }];
    // 10 by Redis at 100 ms, then one unit of fallback per isolate in each of three later periods.
    const redis = Array.from({ length: 10 }, (_, i) => at(1, 100 + i));
    const fell = [1200, 2300, 3400].flatMap((t) =>
      [0, 1].map((isolate) => ({ ...at(1, t + isolate), isolate })),
    );
    expect(checkFallbacks(s, new Map([[KEY, redis]]), new Map([[KEY, fell]]), new Map())).toEqual([]);
  });
});

describe("after the response: give-backs, settlements and debt (checkLedger)", () => {
  const fw: Limits = { algorithm: "fixed-window", limit: 10, periodMs: 1000, burst: 10 };
  /**
   * An admission of a settled rule whose body said it cost `units` more (or fewer), settled by a call between
   * `from` and `to` that said it applied `applied`.
   */
  const moved = (a: Admission, units: number, from: number, to: number, applied?: number): Admission => ({
    ...a,
    response: { counted: true, spent: a.units + units },
    adjust: { kind: "settle", units, at: { from, to }, ...(applied !== undefined && { applied }) },
  });

  it("a charge that certainly landed counts before the next admission: the debt denies until repaid", () => {
    // 5 reserved at 100 ms, charged 8 more at 200..220 ms: the window holds 13, so 1 more at 300 ms is one too many.
    const charged = moved(at(5, 100), 8, 200, 220, 8);
    expect(checkLedger(fw, [charged, at(1, 300)])).toHaveLength(1);
    // The same charge still on its way at 300 ms: the admission may have come first.
    expect(checkLedger(fw, [moved(at(5, 100), 8, 290, 320, 8), at(1, 300)])).toEqual([]);
    // Not answered (it may never have landed): not counted.
    expect(checkLedger(fw, [moved(at(5, 100), 8, 200, 220), at(1, 300)])).toEqual([]);
  });

  it("a give-back frees its units whenever it may have landed, and never more than it gave", () => {
    // 10 reserved, 6 given back (a status not counted, or a smaller real cost): 6 more fit, 7 do not.
    const back = moved(at(10, 100), -6, 500, 520, -6);
    expect(checkLedger(fw, [back, at(6, 600)])).toEqual([]);
    expect(checkLedger(fw, [back, at(7, 600)])).toHaveLength(1);
    // The same give-back by the whole-window check: the 4 units it kept, and the 6 after it.
    expect(checkHistory(fw, [{ ...back, units: floorOf(back) }, at(6, 600)])).toEqual([]);
  });

  it("a bucket: charges that landed between two admissions count against burst + refill", () => {
    const b: Limits = { algorithm: "token-bucket", limit: 10, periodMs: 1000, burst: 5 };
    // 1 reserved at 0 and charged 4 more by 50 ms: 5 units; 1 more at 100 ms fits the refill (5 + 1).
    const first = moved(at(1, 0), 4, 20, 50, 4);
    expect(checkLedger(b, [first, at(1, 100)])).toEqual([]);
    expect(checkLedger(b, [first, at(2, 100)])).toHaveLength(1);
  });

  it("a held request's slot was reserved when it was decided: a charge landing after that is debt, not over-admission", () => {
    // Replays SIM_SEED=283814960 (a gcra rule with a delay, settled): 22 per 250 ms (11,364 µs/unit), burst 4.
    // Four at 0..16 ms, one decided at 11 ms and held to its slot at 22..31 ms: 5 units + 2 charges in 31 ms
    // is more than 4 + 31 / 11.364 = 6.73, but the second charge landed at 17..21 ms, after the held request
    // was decided, so no admission test saw the TAT it pushed: a debt, which the next decision denies.
    const b: Limits = { algorithm: "gcra", limit: 22, periodMs: 250, burst: 4 };
    const held = (from: number, to: number, decidedFrom: number): Admission => ({
      ...at(1, from, to),
      decidedFrom,
    });
    const replay = (charges: [number, number][], decidedFrom: number): Admission[] => [
      moved(at(1, 0, 7), 1, ...(charges[0] as [number, number]), 1),
      at(1, 2, 8),
      moved(at(1, 6, 12), 1, ...(charges[1] as [number, number]), 1),
      at(1, 7, 16),
      held(22, 31, decidedFrom),
    ];
    expect(
      checkLedger(
        b,
        replay(
          [
            [9, 17],
            [17, 21],
          ],
          11,
        ),
      ),
    ).toEqual([]);
    // Both charges certainly landed before the held request was decided: it saw them, and 7 is one too many.
    expect(
      checkLedger(
        b,
        replay(
          [
            [8, 9],
            [13, 14],
          ],
          15,
        ),
      ),
    ).toHaveLength(1);
  });

  it("the code gives back only what the response said: a counted status keeps its units, a settlement the body's cost", () => {
    const login = { ...at(1, 100), response: { counted: true } };
    const given = { kind: "status" as const, units: -1, at: { from: 200, to: 210 }, applied: -1 };
    expect(checkResponses([{ ...login, adjust: given }])).toHaveLength(1);
    expect(checkResponses([{ ...login, response: { counted: false }, adjust: given }])).toEqual([]);
    expect(checkResponses([moved(at(5, 100), 3, 200, 210, 3)])).toEqual([]);
    const misread = moved(at(5, 100), 3, 200, 210, 3);
    expect(
      checkResponses([
        { ...misread, adjust: { ...(misread.adjust as NonNullable<Admission["adjust"]>), units: 2 } },
      ]),
    ).toHaveLength(1);
  });

  it("a tier's own limit bounds each admission decided under it", () => {
    const free: Limits = { ...fw, limit: 4 };
    expect(checkLedger(fw, [at(3, 100), { ...at(2, 200), limits: free }])).toHaveLength(1);
    expect(checkLedger(fw, [at(3, 100), { ...at(1, 200), limits: free }])).toEqual([]);
  });
});

describe("the penalty box (checkBlocks)", () => {
  const denial = (from: number, to = from + 5, certain = true) => ({ at: { from, to }, op: op++, certain });

  it("nothing admitted inside a block, from its first denial, not extended by later ones", () => {
    expect(checkBlocks(500, [denial(100)], [at(1, 300)])).toHaveLength(1);
    expect(checkBlocks(500, [denial(100)], [at(1, 700)])).toEqual([]);
    // A denial during the block (at 300) does not extend it: 700 is past the first one's end.
    expect(checkBlocks(500, [denial(100), denial(300)], [at(1, 700)])).toEqual([]);
  });

  it("a block that may have started earlier (an unanswered decision), or been lifted, is not held to", () => {
    expect(checkBlocks(500, [denial(0, 1000, false), denial(400)], [at(1, 700)])).toEqual([]);
    expect(checkBlocks(500, [denial(100)], [at(1, 300)], [{ from: 200, to: 250 }])).toEqual([]);
  });
});
