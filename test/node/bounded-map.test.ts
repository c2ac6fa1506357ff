import { describe, expect, it } from "vitest";
import { BoundedMap } from "../../src/util/bounded-map";

describe("BoundedMap (per-isolate caches)", () => {
  it("never holds more than its capacity and drops the least recently set entry first", () => {
    const map = new BoundedMap<string, number>(3);
    for (const [key, value] of [
      ["a", 1],
      ["b", 2],
      ["c", 3],
    ] as const)
      map.set(key, value);
    map.set("a", 10); // set again: now the most recent
    map.set("d", 4);
    expect(map.size).toBe(3);
    expect([...map.keys()]).toEqual(["c", "a", "d"]);
    expect(map.get("a")).toBe(10);
    expect(map.has("b")).toBe(false);
  });

  it("holds nothing with a capacity of 0", () => {
    const map = new BoundedMap<string, number>(0);
    map.set("a", 1);
    expect(map.size).toBe(0);
  });
});
