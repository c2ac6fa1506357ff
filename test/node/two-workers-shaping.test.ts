// Delay and shedding across TWO Worker instances (the bundled Worker, each in its own Miniflare/workerd) in
// front of the run's one Redis and one echo origin: the queue's slots and the origin's in-flight budget are
// fleet-wide, so what reaches the origin obeys the rule however the requests are spread over the fleet.
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startWorker } from "../support/miniflare-worker.mjs";

type Worker = Awaited<ReturnType<typeof startWorker>>;

const RULES = [
  {
    name: "queue",
    match: { path: "/queue/*" },
    key: "global",
    algorithm: "gcra",
    limit: 10,
    period: "1s",
    delay: "5s",
  },
  {
    name: "origin",
    match: { path: "/slow" },
    key: "global",
    algorithm: "shed",
    limit: 20,
    priority: "header:x-priority",
    priorities: { critical: 1, post: 0.9, get: 0.8 },
    shards: 2,
  },
];

const workers: Worker[] = [];
beforeAll(async () => {
  const bindings = {
    UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
    UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
    ORIGIN_URL: inject("originUrl"),
    RATE_LIMIT_PREFIX: `two-${process.pid}-${Date.now().toString(36)}`,
    RATE_LIMIT_RULES: RULES,
    RATE_LIMIT_TIMEOUT_MS: "5000",
  };
  workers.push(await startWorker({ bindings }), await startWorker({ bindings }));
}, 120_000);
afterAll(() => Promise.all(workers.map((w) => w.dispose())));

const origin = (path: string) => fetch(`${inject("originUrl")}${path}`).then((r) => r.json());

describe("two Worker instances, one Redis", () => {
  it("hold 50 requests split over both for distinct slots: the burst, then at most 10 a second reach the origin", async () => {
    const tag = crypto.randomUUID();
    const startedAt = Date.now();
    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        (workers[i % 2] as Worker).fetch("/queue/x", {
          headers: { "CF-Connecting-IP": "198.51.100.90", "x-count-tag": tag },
        }),
      ),
    );
    expect(responses.map((r) => r.status)).toEqual(Array(50).fill(200));
    const times = (await Promise.all(responses.map((r) => r.json() as Promise<{ receivedAtMs: number }>)))
      .map((b) => b.receivedAtMs)
      .sort((a, b) => a - b);
    // The envelope: by any moment t, the burst plus one per 100 ms since the start, never more.
    times.forEach((t, i) => {
      expect(i + 1).toBeLessThanOrEqual(10 + Math.floor((t - startedAt) / 100));
    });
  }, 60_000);

  it("keep the origin's in-flight budget across both instances", async () => {
    const tag = crypto.randomUUID();
    const classes = ["critical", "post", "get"];
    const responses = await Promise.all(
      Array.from({ length: 80 }, (_, i) =>
        (workers[i % 2] as Worker).fetch("/slow?ms=1500", {
          headers: { "x-count-tag": tag, "x-priority": classes[i % 3] as string },
        }),
      ),
    );
    await Promise.all(responses.map((r) => r.text()));
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);
    expect(statuses.filter((s) => s === 200).length).toBeLessThanOrEqual(20);
    expect(((await origin(`/__inflight/${tag}`)) as { max: number }).max).toBeLessThanOrEqual(20);
  }, 60_000);
});
