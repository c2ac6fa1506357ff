// Where the dashboard's numbers come from: per-isolate counts flushed into per-minute Redis keys. Two Worker
// instances (two bindings objects = two apps, two aggregators) share one Redis prefix; their counts add up,
// every metrics key has a TTL, and no key or value holds a raw identity.
import { describe, expect, it } from "vitest";
import { hashIdentity } from "../../src/engine/keys";
import { TOTALS_TTL_SECONDS, totalsKey } from "../../src/observability/families";
import { METRICS_TTL_SECONDS } from "../../src/observability/metrics";
import { awayFromWindowEdge } from "../support/window-edge";
import { call, makeEnv, redis } from "./admin-harness";
import { keysUnder } from "./proxy-harness";

const RULES = [
  // An hour, and no epoch-aligned window: no window boundary can fall inside a test.
  { name: "api", key: "header:x-api-key", algorithm: "gcra", limit: 6, period: "1h" },
  { name: "watch", key: "ip", algorithm: "gcra", limit: 3, period: "1h", mode: "monitor" },
];

interface Data {
  rules: Array<{
    name: string;
    last5m: { allowed: number; denied: number; wouldDeny: number };
    topDenied: Array<{ identity: string; count: number }>;
    nearest: Array<{ identity: string; remainingPercent: number }>;
  }>;
  decisions: { last5m: number; degraded5m: Record<string, number> };
}

describe("the dashboard's counts", () => {
  it("add up across two Worker instances, with a TTL on every key and no raw identity stored", async () => {
    const prefix = `t-dmet-${crypto.randomUUID().slice(0, 8)}`;
    const isolateA = makeEnv(prefix, RULES);
    const isolateB = makeEnv(prefix, RULES);
    const send = (testEnv: Record<string, unknown>, key: string, ip: string) =>
      call(testEnv, "/anything", { token: null, headers: { "x-api-key": key }, ip }).then((r) => r.status);

    // 12 requests of one client, alternating between the two instances, concurrently in pairs: 6 allowed.
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      statuses.push(
        ...(await Promise.all([
          send(isolateA, "hot-key", "192.0.2.10"),
          send(isolateB, "hot-key", "192.0.2.10"),
        ])),
      );
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(6);
    expect(statuses.filter((s) => s === 429)).toHaveLength(6);
    expect(await send(isolateB, "calm-key", "192.0.2.11")).toBe(200);

    // Each instance flushes what it still holds before it reads; read B, then A (which now sees both).
    await call(isolateB, "/__floodgate/dashboard.json");
    const data = await (await call(isolateA, "/__floodgate/dashboard.json")).json<Data>();
    const api = data.rules.find((r) => r.name === "api");
    const watch = data.rules.find((r) => r.name === "watch");
    expect(api?.last5m).toEqual({ allowed: 7, denied: 6, wouldDeny: 0, unavailable: 0 });
    // `watch` (monitor, 3 per hour per IP) allowed 192.0.2.10's first 3 and 192.0.2.11's one, and would have
    // denied the rest, except where `api`'s cached denial answered without Redis (`watch` then not evaluated).
    expect(watch?.last5m.allowed).toBe(4);
    expect(watch?.last5m.denied).toBe(0);
    expect((watch?.last5m.wouldDeny ?? 0) + (data.decisions.degraded5m.deny_cache ?? 0)).toBe(9);
    expect(data.decisions.last5m).toBe(13);
    expect(api?.topDenied).toEqual([{ identity: `hash:${await hashIdentity("hot-key")}`, count: 6 }]);
    expect(api?.nearest[0]).toEqual({
      identity: `hash:${await hashIdentity("hot-key")}`,
      remainingPercent: 0,
    });

    const keys = (await keysUnder(prefix)).filter((key) => key.startsWith(`${prefix}:metrics:`));
    expect(keys.length).toBeGreaterThanOrEqual(3); // counts, denied and near for the current minute
    for (const key of keys) {
      const ttl = await redis.ttl(key);
      expect(ttl, key).toBeGreaterThan(0);
      // The all-time totals of /__floodgate/metrics live longer on purpose (docs/monitoring.md).
      expect(ttl, key).toBeLessThanOrEqual(
        key === totalsKey(prefix) ? TOTALS_TTL_SECONDS : METRICS_TTL_SECONDS,
      );
      expect(key).not.toContain("hot-key");
      expect(key).not.toContain("192.0.2.10");
    }
    const dump = JSON.stringify(
      await Promise.all(
        keys.map((key) =>
          key.includes(":denied:") ||
          key.includes(":near:") ||
          key.includes(":paths:") ||
          key.includes(":peak:")
            ? redis.zrange(key, 0, -1)
            : redis.hgetall(key),
        ),
      ),
    );
    expect(dump).not.toContain("hot-key");
    expect(dump).not.toContain("192.0.2.10");
  });

  it("are flushed at most once every few seconds per instance, not per request", async () => {
    const prefix = `t-dmet-${crypto.randomUUID().slice(0, 8)}`;
    const testEnv = makeEnv(prefix, RULES);
    // Counts go to the key of the minute they were made in: all ten must land in the one key read below.
    await awayFromWindowEdge(60_000, 5_000);
    for (let i = 0; i < 10; i++) {
      await call(testEnv, "/anything", {
        token: null,
        headers: { "x-api-key": `k${i}` },
        ip: `192.0.2.${i + 20}`,
      });
    }
    // The first request flushed at once (nothing flushed before); the other 9 wait in the isolate.
    const [counts] = (await keysUnder(prefix)).filter((key) => /:metrics:\d+$/.test(key));
    const flushed = Number((await redis.hget(counts as string, "~decisions")) ?? 0);
    expect(flushed).toBeGreaterThanOrEqual(1);
    expect(flushed).toBeLessThan(10);
    await call(testEnv, "/__floodgate/dashboard.json"); // the dashboard flushes its own isolate first
    expect(Number(await redis.hget(counts as string, "~decisions"))).toBe(10);
  });
});

describe("without RATE_LIMIT_ADMIN_TOKEN", () => {
  it("counts nothing for the dashboard: no metrics key is written", async () => {
    const prefix = `t-dmet-${crypto.randomUUID().slice(0, 8)}`;
    const { RATE_LIMIT_ADMIN_TOKEN: _, ...testEnv } = makeEnv(prefix, RULES);
    for (let i = 0; i < 3; i++) {
      expect(
        (await call(testEnv, "/anything", { token: null, headers: { "x-api-key": "k" }, ip: "192.0.2.50" }))
          .status,
      ).toBe(200);
    }
    const keys = await keysUnder(prefix);
    expect(keys.length).toBeGreaterThan(0); // the limiter's own state
    expect(keys.filter((key) => key.startsWith(`${prefix}:metrics:`))).toEqual([]);
  });
});

describe("the dashboard's lease share", () => {
  it("counts the decisions made in the isolate from leases, as their Server-Timing says", async () => {
    const prefix = `t-dlease-${crypto.randomUUID().slice(0, 8)}`;
    const env = makeEnv(prefix, [
      { name: "hot", key: "header:x-api-key", algorithm: "fixed-window", limit: 1000, period: "1h" },
    ]);
    let leased = 0;
    for (let i = 0; i < 20; i++) {
      const response = await call(env, "/anything", { token: null, headers: { "x-api-key": "k" } });
      if (response.headers.get("Server-Timing")?.includes('desc="lease"')) leased++;
    }
    expect(leased).toBeGreaterThan(0);
    const data = await (await call(env, "/__floodgate/dashboard.json")).json<{
      decisions: { last5m: number; leased5m: number };
    }>();
    expect(data.decisions).toMatchObject({ last5m: 20, leased5m: leased });
  });
});
