/**
 * Delay instead of deny through the Worker (workerd, real Redis, the echo origin): requests over the rate wait
 * for their reserved slots and reach the origin no faster than the rule's rate; beyond the delay they get 429;
 * several rules with delays wait for the longest; a client that leaves while waiting gives its slot back.
 */

import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { Hono } from "hono";
import { parseList } from "structured-headers";
import { describe, expect, it } from "vitest";
import { type RateLimitOptions, rateLimit } from "../../src/index";
import { baseEnv, fetchWorker, makeEnv, newTag, originCount, redis, type Sent, send } from "./proxy-harness";

const tenPerSecond = (extra: Record<string, unknown> = {}) => ({
  name: "smooth",
  key: "ip",
  algorithm: "gcra",
  limit: 10,
  period: "1s",
  delay: "5s",
  ...extra,
});

/** Arrival times at the origin (its clock), sorted. */
const arrivals = (bodies: { json<T>(): T }[]) =>
  bodies.map((b) => b.json<{ receivedAtMs: number }>().receivedAtMs).sort((a, b) => a - b);

describe("delay instead of deny", () => {
  it("passes 50 concurrent requests on at no more than 10 a second after the burst, denying none", async () => {
    const env = makeEnv([tenPerSecond()]);
    const tag = newTag();
    // Before any decision: the rule's slots start no earlier (the machine's clock, shared with Redis and the origin).
    const startedAt = Date.now();
    const responses = await Promise.all(
      Array.from({ length: 50 }, () =>
        send(env, "/smooth", { ip: "198.51.100.70", headers: { "x-count-tag": tag } }),
      ),
    );
    expect(responses.map((r) => r.status)).toEqual(Array(50).fill(200));
    expect(await originCount(tag)).toBe(50);
    const times = arrivals(responses);
    // The leaky bucket's envelope: by any moment t, at most the burst plus one per 100 ms since the start
    // have reached the origin (each arrives at its slot or, by network latency, later; never earlier).
    times.forEach((t, i) => {
      expect(i + 1).toBeLessThanOrEqual(10 + Math.floor((t - startedAt) / 100));
    });
    const delayed = responses.filter((r) => r.headers.get("Server-Timing")?.includes('desc="delayed"'));
    expect(delayed.length).toBe(40);
    for (const r of delayed) {
      const wait = Number(/delay;dur=(\d+)/.exec(r.headers.get("Server-Timing") ?? "")?.[1]);
      expect(wait).toBeGreaterThan(0);
      expect(wait).toBeLessThanOrEqual(5000);
      const [member] = parseList(r.headers.get("RateLimit") ?? "");
      expect(member?.[1].get("delay-ms")).toBe(wait);
    }
  }, 60_000);

  it("answers 429 with Retry-After once a slot would come later than the delay", async () => {
    const env = makeEnv([tenPerSecond({ delay: "1s" })]);
    const tag = newTag();
    const startedAt = Date.now();
    const responses = await Promise.all(
      Array.from({ length: 50 }, () =>
        send(env, "/smooth", { ip: "198.51.100.71", headers: { "x-count-tag": tag } }).then((r) => ({
          ...r,
          backAt: Date.now(),
        })),
      ),
    );
    const waitOf = (r: Sent) =>
      Number(/delay;dur=(\d+)/.exec(r.headers.get("Server-Timing") ?? "")?.[1] ?? 0);
    const ok = responses.filter((r) => r.status === 200);
    const denied = responses.filter((r) => r.status === 429);
    expect(ok.length + denied.length).toBe(50);
    expect(await originCount(tag)).toBe(ok.length);
    // Nobody waited longer than the delay: a later slot was a 429.
    for (const r of ok) expect(waitOf(r)).toBeLessThanOrEqual(1000);
    // 10 at once and the 10 slots within 1 s, plus one slot per 100 ms the decisions took to be made (a
    // request is decided no later than its answer came back, less the time it waited for its slot).
    const decidedWithinMs = Math.max(...responses.map((r) => r.backAt - waitOf(r))) - startedAt;
    expect(ok.length).toBeGreaterThanOrEqual(20);
    expect(ok.length).toBeLessThanOrEqual(21 + Math.floor(decidedWithinMs / 100));
    for (const r of denied) {
      expect(Number(r.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
      expect(r.json().policy).toBe("smooth");
    }
  }, 60_000);

  it("waits for the longest of several delayed rules", async () => {
    const env = makeEnv([
      tenPerSecond({ name: "fast" }),
      tenPerSecond({ name: "slow", algorithm: "token-bucket", limit: 1, period: "2s", delay: "3s" }),
    ]);
    const firstSentAt = Date.now();
    const first = await send(env, "/x", { ip: "198.51.100.72" });
    expect(first.headers.get("Server-Timing")).not.toContain("delay;");
    // Two more at once: the slow rule's next slot is ~2 s away (the fast rule has room), the one after ~4 s,
    // beyond its 3 s delay: one waits ~2 s, the other is denied and the fast rule counts nothing for it.
    const started = Date.now();
    const both = await Promise.all([
      send(env, "/x", { ip: "198.51.100.72" }),
      send(env, "/x", { ip: "198.51.100.72" }),
    ]);
    const elapsed = Date.now() - started;
    const second = both.find((r) => r.status === 200);
    const third = both.find((r) => r.status === 429);
    if (!second || !third) throw new Error(`expected one 200 and one 429, got ${both.map((r) => r.status)}`);
    const wait = Number(/delay;dur=(\d+)/.exec(second.headers.get("Server-Timing") ?? "")?.[1]);
    expect(wait).toBeGreaterThan(0);
    expect(wait).toBeLessThanOrEqual(2000);
    expect(elapsed).toBeGreaterThanOrEqual(wait - 5);
    // It waited for the slow rule's slot: it reached the origin no sooner than 2 s after the first request
    // could have been decided (the fast rule had room: no wait of its own).
    expect(second.json<{ receivedAtMs: number }>().receivedAtMs).toBeGreaterThanOrEqual(
      firstSentAt + 2000 - 5,
    );
    const members = parseList(second.headers.get("RateLimit") ?? "");
    expect(members.map(([name, params]) => [name, params.has("delay-ms")])).toEqual([
      ["fast", false],
      ["slow", true],
    ]);
    expect(third.json()["violated-policies"]).toEqual(["slow"]);
    const fast = parseList(third.headers.get("RateLimit") ?? "").find(([name]) => name === "fast");
    expect(fast?.[1].get("r")).toBe(8); // the first and the delayed one: 10 - 2
  }, 30_000);

  it("never advertises a delay on a request another rule denies: it is held for nothing", async () => {
    const env = makeEnv([
      { name: "two-at-once", key: "ip", algorithm: "concurrency", limit: 2 },
      { name: "queued", key: "ip", algorithm: "gcra", limit: 1, period: "1s", burst: 1, delay: "3s" },
    ]);
    // One passes at once, one waits ~1 s for its slot; both hold a concurrency slot while at the slow origin,
    // so the third is denied by the concurrency rule, though the gcra rule alone would have held it ~2 s.
    const all = await Promise.all(
      Array.from({ length: 3 }, () => send(env, "/slow?ms=1500", { ip: "198.51.100.74" })),
    );
    expect(all.map((r) => r.status).sort()).toEqual([200, 200, 429]);
    const denied = all.find((r) => r.status === 429) as Sent;
    expect(denied.json()["violated-policies"]).toEqual(["two-at-once"]);
    expect(denied.headers.get("Retry-After")).toBe("1");
    expect(denied.headers.get("Server-Timing")).not.toMatch(/delay/);
    const queued = parseList(denied.headers.get("RateLimit") ?? "").find(([name]) => name === "queued");
    expect(queued?.[1].get("r")).toBe(0);
    expect(queued?.[1].has("delay-ms")).toBe(false);
    // The one that was held says so.
    const held = all.filter((r) => r.headers.get("Server-Timing")?.includes('desc="delayed"'));
    expect(held).toHaveLength(1);
    expect(held[0]?.status).toBe(200);
  }, 30_000);

  it("gives the slot back when the client leaves while waiting", async () => {
    const env = makeEnv([tenPerSecond({ limit: 1, period: "2s", delay: "10s" })]);
    const prefix = env.RATE_LIMIT_PREFIX as string;
    const tag = newTag();
    const headers = { "CF-Connecting-IP": "198.51.100.73", "x-count-tag": tag };
    expect((await send(env, "/x", { headers })).status).toBe(200); // the burst of one
    const [key] = (await redis.keys(`${prefix}:smooth:*`)) as string[];
    const before = await redis.get<string>(key as string);
    const controller = new AbortController();
    const held = fetchWorker(
      env,
      new Request("http://floodgate.test/x", { headers, signal: controller.signal }),
    );
    // Its slot is reserved (the TAT moved one interval on), then the client gives up.
    await expect.poll(() => redis.get<string>(key as string), { timeout: 5000 }).not.toBe(before);
    controller.abort();
    expect((await held.response).status).toBe(499);
    await held.done();
    expect(String(await redis.get<string>(key as string))).toBe(String(before));
    expect(await originCount(tag)).toBe(1);
  }, 30_000);

  it("is an option of the middleware too", async () => {
    const app = new Hono();
    const options: RateLimitOptions = {
      redis: { url: baseEnv.UPSTASH_REDIS_REST_URL, token: baseEnv.UPSTASH_REDIS_REST_TOKEN },
      prefix: `mw-${crypto.randomUUID().slice(0, 12)}`,
      rules: [
        { name: "queue", key: "global", algorithm: "token-bucket", limit: 1, period: "1s", delay: "1500ms" },
      ],
    };
    app.use(rateLimit(options));
    app.get("/", (c) => c.json({ waitedMs: c.get("rateLimit")?.rules[0]?.delayMs ?? 0, at: Date.now() }));
    const call = async () => {
      const ctx = createExecutionContext();
      const response = await app.fetch(new Request("http://app.test/"), {}, ctx);
      const body =
        response.status === 200 ? ((await response.json()) as { waitedMs: number; at: number }) : null;
      await waitOnExecutionContext(ctx);
      return { status: response.status, waitedMs: body?.waitedMs ?? 0, at: body?.at ?? 0 };
    };
    const startedAt = Date.now();
    const results = await Promise.all([call(), call(), call()]);
    // One at once, one ~1 s later, and the third's slot (~2 s) is beyond the 1.5 s delay.
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 429]);
    const [now, later] = results.filter((r) => r.status === 200).sort((a, b) => a.waitedMs - b.waitedMs);
    expect(now?.waitedMs).toBe(0);
    expect(later?.waitedMs).toBeGreaterThan(0);
    expect(later?.waitedMs).toBeLessThanOrEqual(1000);
    // The handler ran no sooner than the next token, 1 s after the first could have been taken.
    expect(later?.at).toBeGreaterThanOrEqual(startedAt + 1000 - 5);
  });
});
