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

  it("keep the origin's in-flight budget across both instances: filled, never exceeded, critical let in", async () => {
    const tag = crypto.randomUUID();
    const classes = ["critical", "post", "get"];
    const responses = await Promise.all(
      Array.from({ length: 80 }, (_, i) =>
        (workers[i % 2] as Worker).fetch("/slow?ms=1500", {
          headers: { "x-count-tag": tag, "x-priority": classes[i % 3] as string },
        }),
      ),
    );
    const bodies = await Promise.all(responses.map((r) => r.text()));
    const statuses = responses.map((r) => r.status);
    const admitted = (name?: string) =>
      statuses.filter((s, i) => s === 200 && (name === undefined || classes[i % 3] === name)).length;
    expect(statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);
    // Never more than 20 at the origin, nor more than a lower class's share (8 of each sub-key's 10 for get).
    expect(admitted()).toBeLessThanOrEqual(20);
    const peak = ((await origin(`/__inflight/${tag}`)) as { max: number }).max;
    expect(peak).toBeLessThanOrEqual(20);
    expect(admitted("get")).toBeLessThanOrEqual(16);
    // And the budget is used: each sub-key takes any class until 8 are in flight there, and ~40 requests
    // reach each, so at least 16 were admitted and were at the origin at once.
    expect(admitted()).toBeGreaterThanOrEqual(16);
    expect(peak).toBeGreaterThanOrEqual(16);
    // Only a critical request can take a sub-key's 10th slot, so a sub-key holds a free slot until one does:
    // the first critical request to reach each of the two gets in.
    expect(admitted("critical")).toBeGreaterThanOrEqual(2);
    // The rest were shed: 503 temporary-reduced-capacity, retry in a second.
    const shed = responses.flatMap((r, i) => (r.status === 503 ? [{ r, body: bodies[i] as string }] : []));
    expect(shed.length).toBeGreaterThanOrEqual(60);
    for (const { r, body } of shed) {
      expect(r.headers.get("Retry-After")).toBe("1");
      expect(JSON.parse(body).type).toBe(
        "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
      );
    }
  }, 60_000);
});
