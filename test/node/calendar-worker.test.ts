// A monthly plan anchored on a billing day, live through the bundled Worker (workerd's own time zone data) in
// front of the run's Redis and echo origin (docs/counting.md, "Calendar periods"): its headers say the current
// period's length and count down to its end, on Redis's clock, beside a short window decided in the same call.
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { boundsAround } from "../../src/util/calendar";
import { startWorker } from "../support/miniflare-worker.mjs";

type Worker = Awaited<ReturnType<typeof startWorker>>;

const PLAN = { unit: "month", timeZone: "America/Santiago", anchor: 15 } as const;
const RULES = [
  {
    name: "plan",
    match: { path: "/plan/*" },
    key: "header:x-customer",
    algorithm: "fixed-window",
    limit: 3,
    period: "calendar:month",
    timezone: PLAN.timeZone,
    anchor: PLAN.anchor,
  },
  {
    name: "burst",
    match: { path: "/plan/*" },
    key: "header:x-customer",
    algorithm: "fixed-window",
    limit: 100,
    period: "1m",
  },
];

let worker: Worker;
let direct: IORedis;
beforeAll(async () => {
  direct = new IORedis(inject("redisUrl"), { lazyConnect: true, maxRetriesPerRequest: 1 });
  direct.on("error", () => {});
  worker = await startWorker({
    bindings: {
      UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
      UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
      ORIGIN_URL: inject("originUrl"),
      RATE_LIMIT_PREFIX: `calendar-${process.pid}-${Date.now().toString(36)}`,
      RATE_LIMIT_RULES: RULES,
      RATE_LIMIT_TIMEOUT_MS: "5000",
    },
  });
}, 120_000);
afterAll(async () => {
  await worker?.dispose();
  direct?.disconnect();
});

/** Redis's clock, ms. */
const redisNow = async () => {
  const [s, us] = await direct.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
};

describe("a calendar:month rule anchored on the 15th in America/Santiago", () => {
  it("advertises the period's length and counts down to its end, allowed and denied, beside a 1-minute window", async () => {
    const customer = { "x-customer": `c-${crypto.randomUUID()}` };
    const now = await redisNow();
    const { startMs, endMs } = boundsAround(PLAN, now);
    const first = await worker.fetch("/plan/report", { headers: customer });
    expect(first.status).toBe(200);
    await first.arrayBuffer();
    // Both rules in the one decision: each its own member.
    const policy = first.headers.get("RateLimit-Policy") ?? "";
    expect(policy).toContain(`"plan";q=3;w=${Math.ceil((endMs - startMs) / 1000)}`);
    expect(policy).toContain('"burst";q=100;w=60');
    const limits = first.headers.get("RateLimit") ?? "";
    const t = Number(/"plan";r=2;t=(\d+)/.exec(limits)?.[1]);
    const left = (endMs - (await redisNow())) / 1000;
    expect(Math.abs(t - left)).toBeLessThanOrEqual(2);
    // The strictest rule's reset: the plan's end, the instant the period ends in Santiago's calendar.
    expect(first.headers.get("X-RateLimit-Limit")).toBe("3");
    expect(Math.abs(Number(first.headers.get("X-RateLimit-Reset")) - left)).toBeLessThanOrEqual(2);
    for (let i = 0; i < 2; i++) {
      const next = await worker.fetch("/plan/report", { headers: customer });
      expect(next.status).toBe(200);
      await next.arrayBuffer();
    }
    const denied = await worker.fetch("/plan/report", { headers: customer });
    expect(denied.status).toBe(429);
    const body = (await denied.json()) as { policy: string; retry_after: number };
    expect(body.policy).toBe("plan");
    const stillLeft = (endMs - (await redisNow())) / 1000;
    expect(Math.abs(Number(denied.headers.get("Retry-After")) - stillLeft)).toBeLessThanOrEqual(2);
    expect(Math.abs(body.retry_after - stillLeft)).toBeLessThanOrEqual(2);
  }, 60_000);

  it("refuses a calendar period on another algorithm and an unknown time zone, naming the field", async () => {
    const bad = await startWorker({
      bindings: {
        UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
        UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
        ORIGIN_URL: inject("originUrl"),
        RATE_LIMIT_RULES: [
          { ...RULES[0], timezone: "Moon/Tranquility" },
          { ...RULES[1], algorithm: "sliding-window", period: "calendar:day" },
        ],
      },
    });
    try {
      const response = await bad.fetch("/plan/report");
      expect(response.status).toBe(500);
      const { detail } = (await response.json()) as { detail: string };
      expect(detail).toContain('RATE_LIMIT_RULES[0].timezone: "Moon/Tranquility" is not a time zone');
      expect(detail).toContain(
        "RATE_LIMIT_RULES[1].period: a calendar period is for fixed-window rules (this one is sliding-window)",
      );
    } finally {
      await bad.dispose();
    }
  }, 60_000);
});
