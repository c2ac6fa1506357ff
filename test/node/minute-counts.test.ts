// What a failed flush's minute becomes when it is folded into the counts made since (src/observability/
// minute-counts.ts): nothing lost, nothing counted twice, and where both hold a value for an identity the one
// the dashboard shows is the right one of the two.
import { describe, expect, it } from "vitest";
import { emptyMinute, type MinuteCounts, mergeMinute } from "../../src/observability/minute-counts";

const byRule = <V>(rule: string, entries: [string, V][]) => new Map([[rule, new Map(entries)]]);

function minute(parts: Partial<MinuteCounts>): MinuteCounts {
  return { ...emptyMinute(), ...parts };
}

describe("folding a failed flush into the minute counted since", () => {
  it("adds counts and denials, keeps the highest demand and the lowest remaining, and the newer hint", () => {
    const failed = minute({
      counts: new Map([["~decisions", 5]]),
      denied: byRule("api", [
        ["a", 2],
        ["b", 1],
      ]),
      paths: byRule("api", [["GET /x", 3]]),
      peak: byRule("api", [["a", 1200]]),
      near: byRule("api", [["a", 100]]),
      hints: byRule("api", [
        ["a", "old…"],
        ["b", "bee…"],
      ]),
    });
    const since = minute({
      counts: new Map([["~decisions", 7]]),
      denied: byRule("api", [["a", 1]]),
      paths: byRule("api", [["GET /x", 1]]),
      peak: byRule("api", [["a", 900]]),
      near: byRule("api", [["a", 400]]),
      hints: byRule("api", [["a", "new…"]]),
    });
    mergeMinute(since, failed);
    expect(since.counts.get("~decisions")).toBe(12);
    expect([...(since.denied.get("api") ?? [])]).toEqual([
      ["a", 3],
      ["b", 1],
    ]);
    expect(since.paths.get("api")?.get("GET /x")).toBe(4);
    expect(since.peak.get("api")?.get("a")).toBe(1200);
    expect(since.near.get("api")?.get("a")).toBe(100);
    expect(since.hints.get("api")?.get("a")).toBe("new…");
    expect(since.hints.get("api")?.get("b")).toBe("bee…");
  });

  it("a rule only the failed flush saw is taken whole", () => {
    const since = emptyMinute();
    mergeMinute(since, minute({ denied: byRule("login", [["z", 4]]) }));
    expect(since.denied.get("login")?.get("z")).toBe(4);
  });
});
