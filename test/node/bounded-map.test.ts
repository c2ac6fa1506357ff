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

  it("drops exactly the least recently set entry through any mix of sets, re-sets, deletes and clears", () => {
    // A reference model (an array in set order) beside the map, over long churn: a new key on every few
    // operations, as a new identity per request does, with the map full most of the time.
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    const capacity = 50;
    const map = new BoundedMap<string, number>(capacity);
    let model: string[] = [];
    for (let i = 0; i < 20_000; i++) {
      const op = random(100);
      const key = `k${op < 60 ? i : random(i + 1)}`; // mostly new keys, some set again or deleted
      if (op < 90) {
        map.set(key, i);
        model = [...model.filter((k) => k !== key), key];
        if (model.length > capacity) model.shift();
      } else if (op < 99) {
        map.delete(key);
        model = model.filter((k) => k !== key);
      } else {
        map.clear();
        model = [];
      }
      if (i % 97 === 0) expect([...map.keys()]).toEqual(model);
    }
    expect([...map.keys()]).toEqual(model);
  });
});
