/**
 * How much a region asks the primary for (src/regions/sizing.ts, docs/regions.md "How a region decides"): little
 * on first sight, nothing for an identity too slow to spend a unit within a lease's life, its own pace otherwise.
 */
import { describe, expect, it } from "vitest";
import type { SpentPool } from "../../src/regions/pool";
import { wantedOnMiss, wantedOnRenewal } from "../../src/regions/sizing";

const LIFE_MS = 30_000;
const call = (cost: number, limit = 10, periodMs = 3_600_000) => ({ cost, limit, periodMs });

describe("a miss's ask", () => {
  it("is a quarter of what the limit allows over a lease's life on first sight, none under a low limit", () => {
    // 1,000 an hour: 8.3 in 30 s, a quarter of it 2.
    expect(wantedOnMiss(call(1, 1000, 3_600_000), undefined, 1_000_000, LIFE_MS)).toBe(1 + 2);
    // 10 an hour: no units parked for an identity that may never return.
    expect(wantedOnMiss(call(3, 10, 3_600_000), undefined, 1_000_000, LIFE_MS)).toBe(3);
  });

  it("is the cost alone for an identity slower than one request per lease life", () => {
    // Last seen 40 s ago, no units then: 1 / 40 s * 30 s < 1.
    expect(wantedOnMiss(call(1), { atMs: 960_000, units: 0 }, 1_000_000, LIFE_MS)).toBe(1);
  });

  it("is the region's pace over the lease's life for one that keeps coming", () => {
    // One request 5 s ago and nothing leased then: 6 in 30 s.
    expect(wantedOnMiss(call(1), { atMs: 995_000, units: 0 }, 1_000_000, LIFE_MS)).toBe(1 + 6);
    // 9 units and their request spent in 3 s: 100 in 30 s.
    expect(wantedOnMiss(call(1), { atMs: 997_000, units: 9 }, 1_000_000, LIFE_MS)).toBe(1 + 100);
    // A burst's first ms counts as 100 ms.
    expect(wantedOnMiss(call(1), { atMs: 999_999, units: 0 }, 1_000_000, LIFE_MS)).toBe(1 + 300);
  });
});

describe("a renewal's ask", () => {
  const pool = (granted: number, left: number, depositedAt: number): SpentPool => ({
    granted,
    left,
    renew: true,
    figures: {
      limit: 100,
      periodMs: 60_000,
      overridden: false,
      stateLeft: 50,
      resetAt: 0,
      retryAt: 0,
      depositedAt,
    },
  });

  it("is what the region spends at its pace from when the pool runs out until the new lease ends", () => {
    // 10 of 20 spent in 10 s: 30 in a lease's life, less the 10 left (which last 10 s of it).
    expect(wantedOnRenewal(pool(20, 10, 990_000), 1_000_000, LIFE_MS)).toBe(20);
    // 150 units a 30 s lease at 5 a second, half spent: the next grant is 75, not 150 (which would expire half unspent).
    expect(wantedOnRenewal(pool(150, 75, 985_000), 1_000_000, LIFE_MS)).toBe(75);
    expect(wantedOnRenewal(pool(2, 1, 0), 1_000_000, LIFE_MS)).toBe(1);
  });
});
