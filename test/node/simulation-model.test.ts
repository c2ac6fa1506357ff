// The simulator's model (test/sim/model.ts) on histories written by hand: it must flag every over-admission no
// choice of instants explains, and never one that some choice does (docs/exactness.md, "The model").
import { describe, expect, it } from "vitest";
import { type Admission, checkHistory, type Limits } from "../sim/model";
import { inEffect } from "../sim/system";

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
