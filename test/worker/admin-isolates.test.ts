import { describe, expect, it } from "vitest";
import { hashIdentity } from "../../src/engine/keys";
import { createLiveModes, LOST_CHANGE_AFTER_MS } from "../../src/live";
import { CHANGE_RING, readChanges, recordChange } from "../../src/live/changes";
import { liveModeKey } from "../../src/live/modes";
import { call, makeEnv, port, redis, send, uniquePrefix } from "./admin-harness";

const RULES = [{ name: "api", key: "header:x-api-key", algorithm: "fixed-window", limit: 2, period: "1h" }];
/**
 * Two bindings objects with one prefix = two isolates of one deployment (each with its own deny cache and
 * live-mode copy); each test its own prefix, so no count or override of another test (or run) is seen.
 */
function twoIsolates() {
  const prefix = uniquePrefix("admin-isolates");
  return { isolateA: makeEnv(prefix, RULES), isolateB: makeEnv(prefix, RULES) };
}

const request = (env: Record<string, unknown>, apiKey: string) =>
  call(env, "/anything", { headers: { "x-api-key": apiKey }, ip: "198.51.100.20" });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Requests from `isolate` until one is allowed; ms from `sinceMs` to that one, or undefined. */
async function firstAllowed(
  isolate: Record<string, unknown>,
  apiKey: string,
  sinceMs: number,
): Promise<number | undefined> {
  while (Date.now() - sinceMs < 3000) {
    const response = await request(isolate, apiKey);
    if (response.status === 200) return Date.now() - sinceMs;
    expect(response.status).toBe(429);
    await sleep(50);
  }
  return undefined;
}

describe("admin changes reach every isolate", () => {
  it("a reset in one isolate unblocks the client in another within about a second, despite its deny cache", async () => {
    const { isolateA, isolateB } = twoIsolates();
    await request(isolateA, "key-reset"); // both isolates warm
    await request(isolateB, "key-reset");
    // Isolate B denies from Redis once, then from its deny cache for the rest of the hour.
    expect((await request(isolateB, "key-reset")).status).toBe(429);
    expect((await request(isolateB, "key-reset")).status).toBe(429);

    const resetAt = Date.now();
    expect((await call(isolateA, "/__floodgate/keys/api/key-reset", { method: "DELETE" })).status).toBe(200);
    expect((await request(isolateA, "key-reset")).status).toBe(200);
    const elapsedMs = await firstAllowed(isolateB, "key-reset", resetAt);
    expect(elapsedMs).toBeDefined();
    expect(elapsedMs).toBeLessThanOrEqual(2000); // one refresh interval (1 s) + one Redis read, with slack for a loaded CI machine
  });

  it("so does an override that raises the client's limit", async () => {
    const { isolateA, isolateB } = twoIsolates();
    await request(isolateA, "key-raise");
    await request(isolateB, "key-raise");
    expect((await request(isolateB, "key-raise")).status).toBe(429);
    const raisedAt = Date.now();
    await send(isolateA, "PUT", "/__floodgate/overrides/api/key-raise", { limit: 10 });
    const elapsedMs = await firstAllowed(isolateB, "key-raise", raisedAt);
    expect(elapsedMs).toBeDefined();
    expect(elapsedMs).toBeLessThanOrEqual(2000); // one refresh interval (1 s) + one Redis read, with slack for a loaded CI machine
  });

  it("keeps the change log bounded, and a reader stops at a slot not yet written", async () => {
    const prefix = uniquePrefix("admin-isolates-ring");
    const hashes = await Promise.all([1, 2, 3].map((i) => hashIdentity(`ring-${i}`)));
    for (const identityHash of hashes) await recordChange(port, prefix, { rule: "api", identityHash });
    expect(await readChanges(port, prefix, 0, 3)).toEqual({
      changes: hashes.map((identityHash) => ({ rule: "api", identityHash })),
      readUpTo: 3,
    });
    expect((await readChanges(port, prefix, 2, 3)).changes).toHaveLength(1);
    // Epoch 4 announced, its slot not written yet: read up to 3, try 4 again later.
    await redis.hincrby(liveModeKey(prefix), "epoch", 1);
    expect((await readChanges(port, prefix, 2, 4)).readUpTo).toBe(3);

    // However many changes are recorded, the hash holds at most the ring plus its counter (a small ring
    // here, to keep the test short; production uses CHANGE_RING).
    const ring = 16;
    const ringPrefix = `${prefix}-small`;
    await Promise.all(
      Array.from({ length: 50 }, (_, n) =>
        recordChange(port, ringPrefix, { rule: "api", identityHash: `h${n}` }, ring),
      ),
    );
    expect(await redis.hget(liveModeKey(ringPrefix), "epoch")).toBe(50);
    expect(await redis.hlen(liveModeKey(ringPrefix))).toBe(ring + 1);
    // A reader that fell more than a ring behind reads only the last ring's worth.
    const behind = await readChanges(port, ringPrefix, 0, 50, ring);
    expect(behind.readUpTo).toBe(50);
    expect(behind.changes).toHaveLength(ring);
    expect(CHANGE_RING).toBeGreaterThanOrEqual(1000);
  });

  it("waits for a slot written late, but a change never written does not stop the log for good", async () => {
    const prefix = uniquePrefix("admin-isolates-lost");
    let clockMs = 0;
    const forgotten: string[] = [];
    const live = createLiveModes(port, prefix, {
      ruleNames: ["api"],
      forget: (_rule, identityHash) => forgotten.push(identityHash),
      now: () => clockMs,
    });
    /** One background refresh, `ms` after the last. */
    const refreshAfter = async (ms: number) => {
      clockMs += ms;
      const background: Promise<unknown>[] = [];
      await live.current((p) => background.push(p));
      await Promise.all(background);
    };
    await refreshAfter(0); // the cold load: the log starts here

    // A writer between its two commands: epoch 1 taken, its slot written 5 s later.
    await redis.hincrby(liveModeKey(prefix), "epoch", 1);
    await recordChange(port, prefix, { rule: "api", identityHash: "second" });
    await refreshAfter(1000);
    expect(forgotten).toEqual([]);
    await redis.hset(liveModeKey(prefix), { "change:1": "1|api|first" });
    await refreshAfter(4000);
    expect(forgotten).toEqual(["first", "second"]);

    // A writer that died between them: epoch 3 is never written; the change after it still arrives.
    await redis.hincrby(liveModeKey(prefix), "epoch", 1);
    await recordChange(port, prefix, { rule: "api", identityHash: "fourth" });
    await refreshAfter(1000);
    await refreshAfter(LOST_CHANGE_AFTER_MS - 1000);
    expect(forgotten).toEqual(["first", "second"]);
    await refreshAfter(1000);
    expect(forgotten).toEqual(["first", "second", "fourth"]);
  });
});

describe("a new override, as the decision reads it only for identities known to have one", () => {
  const rules = [
    { name: "api", key: "header:x-api-key", algorithm: "fixed-window", limit: 100, period: "1h" },
  ];

  /** Requests from `env` until one is denied; ms from `sinceMs` to that one, or undefined. */
  async function firstDenied(env: Record<string, unknown>, apiKey: string, sinceMs: number) {
    while (Date.now() - sinceMs < 3000) {
      const response = await request(env, apiKey);
      if (response.status === 429) return Date.now() - sinceMs;
      expect(response.status).toBe(200);
      await sleep(50);
    }
    return undefined;
  }

  it("applies from the next request of the isolate that wrote it, within about a second in another, and at once in a fresh one", async () => {
    const prefix = uniquePrefix("admin-isolates-lower");
    const writer = makeEnv(prefix, rules);
    const other = makeEnv(prefix, rules);
    expect((await request(writer, "key-lower")).status).toBe(200); // both isolates warm, 1 of 100 used
    expect((await request(other, "key-lower")).status).toBe(200);

    const loweredAt = Date.now();
    expect((await send(writer, "PUT", "/__floodgate/overrides/api/key-lower", { limit: 2 })).status).toBe(
      200,
    );
    expect((await request(writer, "key-lower")).status).toBe(429); // 2 used: the override's whole limit
    const elapsedMs = await firstDenied(other, "key-lower", loweredAt);
    expect(elapsedMs).toBeDefined();
    expect(elapsedMs).toBeLessThanOrEqual(2000); // one refresh interval (1 s) + one Redis read, with slack for a loaded CI machine

    // An isolate started after the override reads every identity's override until its index is in.
    const fresh = makeEnv(prefix, rules);
    expect((await request(fresh, "key-lower")).status).toBe(429);

    // Removed: the rule's own limit again, in the writer at once.
    expect((await call(writer, "/__floodgate/overrides/api/key-lower", { method: "DELETE" })).status).toBe(
      204,
    );
    expect((await request(writer, "key-lower")).status).toBe(200);
  });
});
