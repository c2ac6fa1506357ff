// A live global switch with an end (PUT /__floodgate/mode with `ttl`, docs/operating.md) ends by Redis's clock
// (src/live/redis-clock.ts), whichever isolate wrote it and whichever reads it: here the writing isolate's clock
// is an hour behind and the reading one's an hour ahead (Date faked in each), against the run's real Redis.
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import { createRedisPort } from "../../src/engine/redis";
import { readLiveModes, writeLiveMode } from "../../src/live/modes";

const HOUR_MS = 3_600_000;
/** A port as a fresh isolate has it: its own measure of Redis's clock. */
const isolatePort = () =>
  createRedisPort({ url: inject("redisRestUrl"), token: inject("redisRestToken"), timeoutMs: 5000 });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

afterEach(() => {
  vi.useRealTimers();
});

describe("a live global switch with an end", () => {
  it("is in force until its end by Redis's clock, however far the isolates' clocks are off, then lapses", async () => {
    const prefix = `t-modeclock-${crypto.randomUUID().slice(0, 8)}`;
    const realNow = Date.now();
    vi.useFakeTimers({ toFake: ["Date"] });

    vi.setSystemTime(realNow - HOUR_MS); // the writer's clock: an hour behind
    await writeLiveMode(isolatePort(), prefix, undefined, "monitor", 2);

    vi.setSystemTime(realNow + HOUR_MS); // a reader's clock: an hour ahead
    const ahead = await readLiveModes(isolatePort(), prefix, []);
    expect(ahead.global).toBe("monitor");
    // The end it reports is Redis's: about two seconds from now.
    expect(Math.abs((ahead.globalUntilMs ?? 0) - (realNow + 2000))).toBeLessThan(1500);

    vi.useRealTimers();
    await sleep(2500);
    const after = await readLiveModes(isolatePort(), prefix, []);
    expect(after.global).toBeUndefined();
  });
});
