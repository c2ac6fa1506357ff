// `npm run redis-rest -- --rtt <ms>`: the local REST server as a database in another region. Checked with the
// real @upstash/redis client through the CLI, in front of the run's redis-server: every request pays the
// round trip, requests in flight together pay it together (a network, not a queue), and a command runs
// half-way (when it would reach the faraway database), so a write is visible to a nearby reader before its
// writer hears back.
import { spawn } from "node:child_process";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { freePort, stopChild, waitForOutput } from "../../redis-rest/index.mjs";

const RTT_MS = 150;
const prefix = `rtt:${process.pid}:`;
let faraway: { url: string; token: string };
let stop: () => Promise<void>;

/** The CLI on a free port in front of the run's redis-server; resolves with its URL once it listens. */
async function startCli(args: string[]) {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    ["redis-rest/cli.mjs", "--port", String(port), "--token", "rtt-token", ...args],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  return { child, port };
}

beforeAll(async () => {
  const { child, port } = await startCli(["--redis", inject("redisUrl"), "--rtt", String(RTT_MS)]);
  stop = () => stopChild(child, { signal: "SIGTERM" });
  await waitForOutput(child, new RegExp(`listening on http://127\\.0\\.0\\.1:${port}\\n`), 15_000);
  faraway = { url: `http://127.0.0.1:${port}`, token: "rtt-token" };
});
afterAll(async () => {
  await stop?.();
});

const client = (endpoint: { url: string; token: string }) =>
  new Redis({
    url: endpoint.url,
    token: endpoint.token,
    enableAutoPipelining: false,
    automaticDeserialization: false,
    enableTelemetry: false,
    retry: { retries: 0 },
  });

/** How long `run` takes, ms. */
async function timed(run: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await run();
  return performance.now() - started;
}

describe("npm run redis-rest -- --rtt <ms>", () => {
  it("adds the round trip to every command, script and pipeline, and still answers them right", async () => {
    const redis = client(faraway);
    await redis.ping(); // a connection already open: what is left is the round trip alone
    expect(await timed(() => redis.set(`${prefix}a`, "1"))).toBeGreaterThanOrEqual(RTT_MS - 5);
    const script = redis.createScript<number>("return redis.call('incr', KEYS[1])");
    let reply: number | undefined;
    expect(
      await timed(async () => {
        reply = await script.exec([`${prefix}a`], []);
      }),
    ).toBeGreaterThanOrEqual(RTT_MS - 5);
    expect(reply).toBe(2);
    const pipeline = redis.pipeline().get(`${prefix}a`).incr(`${prefix}a`);
    let replies: unknown[] = [];
    expect(
      await timed(async () => {
        replies = await pipeline.exec();
      }),
    ).toBeGreaterThanOrEqual(RTT_MS - 5);
    expect(replies).toEqual(["2", 3]);
  });

  it("lets requests in flight together share one round trip, as a network does", async () => {
    const redis = client(faraway);
    await redis.ping();
    const elapsed = await timed(() =>
      Promise.all(Array.from({ length: 10 }, (_, i) => redis.set(`${prefix}c${i}`, "v"))),
    );
    expect(elapsed).toBeGreaterThanOrEqual(RTT_MS - 5);
    // Ten in a queue would take ten round trips; together they take about one.
    expect(elapsed).toBeLessThan(3 * RTT_MS);
  });

  it("runs a command half-way: a nearby reader sees the write before the faraway writer hears back", async () => {
    const writer = client(faraway);
    const nearby = client({ url: inject("redisRestUrl"), token: inject("redisRestToken") });
    await writer.ping();
    const key = `${prefix}half`;
    const started = performance.now();
    const write = writer.set(key, "written");
    await new Promise((resolve) => setTimeout(resolve, RTT_MS * 0.75));
    // Past the way there: the command has run, while its answer is still on its way back.
    expect(await nearby.get(key)).toBe("written");
    expect(await write).toBe("OK");
    expect(performance.now() - started).toBeGreaterThanOrEqual(RTT_MS - 5);
  });

  it("refuses a round trip that is not a number of ms", async () => {
    for (const bad of ["-5", "soon", ""]) {
      const { child } = await startCli(["--rtt", bad]);
      const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
      expect(code).toBe(2);
    }
  });
});
