import { describe, expect, it } from "vitest";
import { LiveModeCache } from "../../src/live/cache";
import { readLiveModes, writeLiveMode } from "../../src/live/modes";
import { port, redis, uniquePrefix } from "./admin-harness";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A cache over real Redis that counts its reads and collects its background work. */
function cacheFor(prefix: string, refreshIntervalMs = 1000) {
  let reads = 0;
  const background: Promise<unknown>[] = [];
  const cache = new LiveModeCache({
    load: () => {
      reads++;
      return readLiveModes(port, prefix);
    },
    refreshIntervalMs,
  });
  const current = () => cache.current((p) => background.push(p));
  return { cache, current, background, reads: () => reads };
}

describe("live modes", () => {
  it("stores a global and a per-rule switch in one hash without a TTL, and clears them with null", async () => {
    const prefix = uniquePrefix("live-store");
    await writeLiveMode(port, prefix, undefined, "monitor");
    await writeLiveMode(port, prefix, "api", "off");
    expect(await readLiveModes(port, prefix)).toEqual({ global: "monitor", rules: { api: "off" } });
    expect(await redis.ttl(`${prefix}:mode`)).toBe(-1);
    await writeLiveMode(port, prefix, undefined, null);
    expect(await readLiveModes(port, prefix)).toEqual({ rules: { api: "off" } });
    await writeLiveMode(port, prefix, "api", null);
    expect(await readLiveModes(port, prefix)).toEqual({ rules: {} });
  });

  it("ignores values written by hand that are not modes", async () => {
    const prefix = uniquePrefix("live-junk");
    await redis.hset(`${prefix}:mode`, { global: "sometimes", "rule:api": "monitor", other: "on" });
    expect(await readLiveModes(port, prefix)).toEqual({ rules: { api: "monitor" } });
  });

  it("makes a fresh isolate's first request wait for the live modes, so an old switch is never ignored", async () => {
    const prefix = uniquePrefix("live-cold");
    await writeLiveMode(port, prefix, undefined, "off");
    const { current, reads } = cacheFor(prefix);
    expect(await current()).toEqual({ global: "off", rules: {} });
    expect(reads()).toBe(1);
  });

  it("reads Redis at most once per interval however many requests come, and only in the background", async () => {
    const prefix = uniquePrefix("live-rate");
    const { current, background, reads } = cacheFor(prefix, 300);
    await current(); // cold load
    for (let i = 0; i < 200; i++) await current();
    expect(reads()).toBe(1);
    expect(background).toHaveLength(0);

    await sleep(320);
    const requests = await Promise.all(Array.from({ length: 100 }, () => current()));
    expect(requests).toHaveLength(100);
    expect(background).toHaveLength(1); // one refresh for 100 concurrent requests, handed to waitUntil
    await Promise.all(background);
    expect(reads()).toBe(2);
  });

  it("sees a switch on a request within one interval of it, without that request waiting for Redis", async () => {
    const prefix = uniquePrefix("live-switch");
    const { current, background } = cacheFor(prefix, 300);
    expect((await current()).global).toBeUndefined();
    await writeLiveMode(port, prefix, undefined, "monitor");
    // Until the interval has passed, the isolate still uses its copy.
    expect((await current()).global).toBeUndefined();
    await sleep(320);
    await current(); // starts the background refresh; this request is not held up by it
    await Promise.all(background);
    expect((await current()).global).toBe("monitor");
  });

  it("keeps the last known modes when a refresh fails", async () => {
    let fail = false;
    const background: Promise<unknown>[] = [];
    const cache = new LiveModeCache({
      load: async () => {
        if (fail) throw new Error("Redis is down");
        return { global: "monitor", rules: {} };
      },
      refreshIntervalMs: 0,
    });
    expect((await cache.current((p) => background.push(p))).global).toBe("monitor");
    fail = true;
    await cache.current((p) => background.push(p));
    await Promise.all(background);
    expect((await cache.current((p) => background.push(p))).global).toBe("monitor");
    expect(cache.stats.failures).toBeGreaterThanOrEqual(1);
  });
});
