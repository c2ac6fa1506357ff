/**
 * Several databases: rendezvous hashing spreads identities evenly over the endpoints, and adding or removing
 * one moves only the identities that must move.
 */
import { describe, expect, it } from "vitest";
import { hashIdentity } from "../../src/engine/keys";
import { rendezvous } from "../../src/engine/shards";

const URLS = ["https://one.upstash.io", "https://two.upstash.io", "https://three.upstash.io"];
const FOURTH = "https://four.upstash.io";
const IDENTITIES = 30_000;

// Real identity hashes, as the proxy computes them (SHA-256, base64url).
const hashes = Promise.all(Array.from({ length: IDENTITIES }, (_, i) => hashIdentity(`203.0.113.${i}`)));

describe("rendezvous hashing over several databases", () => {
  it("spreads identities within ±10 % of even over 3 endpoints", async () => {
    const shardOf = rendezvous(URLS);
    const counts = [0, 0, 0];
    for (const hash of await hashes) counts[shardOf(hash)] = (counts[shardOf(hash)] ?? 0) + 1;
    const even = IDENTITIES / URLS.length;
    for (const count of counts) {
      expect(count).toBeGreaterThanOrEqual(even * 0.9);
      expect(count).toBeLessThanOrEqual(even * 1.1);
    }
  });

  it("moves at most 30 % of identities when a fourth endpoint is added, all of them to the new one", async () => {
    const before = rendezvous(URLS);
    const after = rendezvous([...URLS, FOURTH]);
    let moved = 0;
    for (const hash of await hashes) {
      const now = after(hash);
      if (now === before(hash)) continue;
      moved++;
      expect(now).toBe(3);
    }
    expect(moved / IDENTITIES).toBeLessThanOrEqual(0.3);
    // And the fourth gets its fair share, not a sliver.
    expect(moved / IDENTITIES).toBeGreaterThanOrEqual(0.2);
  });

  it("moves only the removed endpoint's identities when one is removed", async () => {
    const all = rendezvous(URLS);
    const without = rendezvous([URLS[0] as string, URLS[2] as string]);
    for (const hash of (await hashes).slice(0, 5000)) {
      const was = URLS[all(hash)];
      const now = [URLS[0], URLS[2]][without(hash)];
      if (was !== URLS[1]) expect(now).toBe(was);
    }
  });

  it("does not depend on the order the endpoints are listed in", async () => {
    const forward = rendezvous(URLS);
    const reversed = rendezvous([...URLS].reverse());
    for (const hash of (await hashes).slice(0, 5000)) {
      expect(URLS[forward(hash)]).toBe([...URLS].reverse()[reversed(hash)]);
    }
  });

  it("always picks the only endpoint, and refuses an empty or duplicated list", () => {
    expect(rendezvous([URLS[0] as string])("anything")).toBe(0);
    expect(() => rendezvous([])).toThrow(/at least one/);
    expect(() => rendezvous([URLS[0] as string, URLS[0] as string])).toThrow(/distinct/);
  });
});
