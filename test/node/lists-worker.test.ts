// Action rules and live lists through the real Worker (bundled as for deploy), TWO instances (each its own
// Miniflare/workerd, its own isolate) in front of the run's one Redis (docs/lists.md): a deny answers 403
// naming its rule without a Redis call, an allow exempts a client from every later rule, and a list edited
// through one instance's admin API is obeyed by the other within about a second.
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startWorker } from "../support/miniflare-worker.mjs";

type Worker = Awaited<ReturnType<typeof startWorker>>;

const TOKEN = "lists-test-admin-token-0123456789abcdef";

const RULES = [
  { name: "office", action: "allow", match: { ip: ["192.0.2.0/28", "2001:db8:aaaa::/48"] } },
  { name: "no-curl", action: "deny", match: { path: "/api/*", user_agent: ["*curl*"] } },
  { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 2, period: "1h" },
  { name: "legacy", action: "deny", match: { ip: ["203.0.113.0/24"] } },
];

const workers: Worker[] = [];
const prefix = `lists-${process.pid}-${Date.now().toString(36)}`;
let direct: IORedis;

beforeAll(async () => {
  const bindings = {
    UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
    UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
    ORIGIN_URL: inject("originUrl"),
    RATE_LIMIT_PREFIX: prefix,
    RATE_LIMIT_RULES: RULES,
    RATE_LIMIT_TIMEOUT_MS: "5000",
    RATE_LIMIT_ADMIN_TOKEN: TOKEN,
  };
  workers.push(await startWorker({ bindings }), await startWorker({ bindings }));
  direct = new IORedis(inject("redisUrl"), { maxRetriesPerRequest: 1 });
}, 120_000);

afterAll(async () => {
  direct?.disconnect();
  await Promise.all(workers.map((w) => w.dispose()));
});

const worker = (i: number) => workers[i] as Worker;

/** One request from `ip` to instance `i`; its status. */
async function statusOf(i: number, ip: string, path = "/x", headers: Record<string, string> = {}) {
  const response = await worker(i).fetch(path, { headers: { "CF-Connecting-IP": ip, ...headers } });
  await response.arrayBuffer();
  return response.status;
}

/**
 * The commands Redis runs that name this file's prefix while `during` runs (MONITOR sees every client's; the
 * prefix keeps other test files' out).
 */
async function commandsDuring(during: () => Promise<void>): Promise<string[]> {
  const monitor = await direct.monitor();
  const seen: string[] = [];
  monitor.on("monitor", (_time: string, args: string[]) => {
    if (args.some((arg) => String(arg).includes(prefix))) seen.push(args.join(" "));
  });
  try {
    await during();
    await new Promise((resolve) => setTimeout(resolve, 100));
  } finally {
    monitor.disconnect();
  }
  return seen;
}

describe("action rules", () => {
  it("a deny answers 403 problem+json naming the rule, counts nothing and calls no Redis", async () => {
    // Warm both isolates first: a fresh isolate reads its live modes once.
    expect(await statusOf(0, "198.51.100.1", "/warm")).toBe(200);
    expect(await statusOf(1, "198.51.100.1", "/warm")).toBe(200);
    let bodies: Record<string, unknown>[] = [];
    const commands = await commandsDuring(async () => {
      const responses = await Promise.all(
        Array.from({ length: 10 }, (_, i) =>
          worker(i % 2).fetch("/api/things", {
            headers: { "CF-Connecting-IP": `198.51.100.${20 + i}`, "User-Agent": "curl/8.4.0" },
          }),
        ),
      );
      for (const response of responses) {
        expect(response.status).toBe(403);
        expect(response.headers.get("Content-Type")).toBe("application/problem+json");
        expect(response.headers.get("Cache-Control")).toBe("no-store");
      }
      bodies = await Promise.all(responses.map((r) => r.json() as Promise<Record<string, unknown>>));
    });
    expect(bodies[0]).toEqual({
      type: "about:blank",
      title: "Forbidden",
      status: 403,
      detail: 'Rule "no-curl" denies this request.',
      rule: "no-curl",
    });
    // No decision for any of them (a live-mode refresh, HMGET of the mode hash, may fall in the window).
    expect(commands.filter((command) => !/^hmget /i.test(command))).toEqual([]);
    // Nothing counted: the same client, without curl, still has its 2 requests.
    expect(await statusOf(0, "198.51.100.20", "/api/things")).toBe(200);
    expect(await statusOf(1, "198.51.100.20", "/api/things")).toBe(200);
    expect(await statusOf(0, "198.51.100.20", "/api/things")).toBe(429);
  });

  it("an allow exempts a client from every later rule, on both instances; other clients are limited", async () => {
    const statuses = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        statusOf(i % 2, i % 3 === 0 ? "192.0.2.5" : "::ffff:192.0.2.9", "/api/x", { "User-Agent": "curl/8" }),
      ),
    );
    expect(statuses).toEqual(Array(12).fill(200));
    expect(await statusOf(1, "2001:DB8:AAAA:1::7")).toBe(200);
    const others = [];
    for (let i = 0; i < 4; i++) others.push(await statusOf(i % 2, "192.0.2.16"));
    expect(others).toEqual([200, 200, 429, 429]);
  });

  it("a deny after a counting rule is still a 403, and counts nothing in the rule before it", async () => {
    expect(await statusOf(0, "203.0.113.5")).toBe(403);
    expect(await statusOf(1, "::ffff:203.0.113.5")).toBe(403);
    const state = await direct.keys(`${prefix}:per-ip:*`);
    expect(state.length).toBeGreaterThan(0); // the other tests' clients were counted …
    const before = state.length;
    for (let i = 0; i < 3; i++) expect(await statusOf(i % 2, `203.0.113.${40 + i}`)).toBe(403);
    expect((await direct.keys(`${prefix}:per-ip:*`)).length).toBe(before); // … these were not
  });
});
