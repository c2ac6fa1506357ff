import { type Item, parseList } from "structured-headers";
import { describe, expect, it } from "vitest";
import { awayFromWindowEdge } from "../support/window-edge";
import { keysUnder, makeEnv, newTag, originCount, send, twoInstances } from "./proxy-harness";

const perIp = (limit: number, extra: Record<string, unknown> = {}) => ({
  name: "per-ip",
  key: "ip",
  algorithm: "fixed-window",
  limit,
  period: "1h",
  ...extra,
});

/** A structured-field list parsed with a real parser, as `{ name: params }`. */
function members(field: string | null): Record<string, Record<string, unknown>> {
  expect(field).not.toBeNull();
  const out: Record<string, Record<string, unknown>> = {};
  for (const member of parseList(field as string)) {
    const [name, params] = member as Item;
    expect(typeof name).toBe("string");
    out[name as string] = Object.fromEntries(params);
  }
  return out;
}

describe("limiting at the edge", () => {
  it("proxies up to the limit and denies the next request with a 429 problem", async () => {
    const env = makeEnv([perIp(3)]);
    const tag = newTag();
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      statuses.push(
        (await send(env, "/hello", { ip: "198.51.100.1", headers: { "x-count-tag": tag } })).status,
      );
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
    expect(await originCount(tag)).toBe(3);
  });

  it("lets exactly 50 of 300 concurrent requests through to the origin for a limit of 50, over two Worker instances", async () => {
    // A 5 s decision budget: with the default 200 ms, a loaded machine times some of 300 concurrent decisions
    // out, and the fallback then answers requests Redis counted (47 or 48 of 50 admitted).
    const instance = twoInstances(
      makeEnv([perIp(50, { algorithm: "sliding-window" })], { RATE_LIMIT_TIMEOUT_MS: "5000" }),
    );
    const tag = newTag();
    const responses = await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        send(instance(i), "/burst", {
          ip: "198.51.100.2",
          headers: { "x-count-tag": tag },
        }),
      ),
    );
    /** How many got `status`, from both instances or from the one numbered `of` (the i-th went to i % 2). */
    const count = (status: number, of?: 0 | 1) =>
      responses.filter((r, i) => r.status === status && (of === undefined || i % 2 === of)).length;
    expect(count(200)).toBe(50);
    expect(count(429)).toBe(250);
    expect(await originCount(tag)).toBe(50);
    // Both instances admitted some: the 50 were shared out between them, not all decided by one.
    expect(count(200, 0)).toBeGreaterThan(0);
    expect(count(200, 1)).toBeGreaterThan(0);
  });

  it("still limits a client that rotates a spoofed X-Forwarded-For and X-Real-IP", async () => {
    const env = makeEnv([perIp(2)]);
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const spoofed = `203.0.113.${i + 10}`;
      const sent = await send(env, "/", {
        ip: "198.51.100.3",
        headers: { "X-Forwarded-For": spoofed, "X-Real-IP": spoofed, "True-Client-IP": spoofed },
      });
      statuses.push(sent.status);
    }
    expect(statuses).toEqual([200, 200, 429, 429]);
    // Another real client is unaffected.
    expect((await send(env, "/", { ip: "198.51.100.4" })).status).toBe(200);
  });

  it("sends RateLimit-Policy, RateLimit and X-RateLimit-* that a structured-field parser reads", async () => {
    const env = makeEnv([
      perIp(10, { name: "per-minute", period: "1m" }),
      { name: "bucket", key: "ip", algorithm: "token-bucket", limit: 100, period: "1m", burst: 5 },
      { name: "in-flight", key: "ip", algorithm: "concurrency", limit: 3 },
    ]);
    const sent = await send(env, "/headers", { ip: "198.51.100.5" });
    expect(sent.status).toBe(200);
    expect(members(sent.headers.get("RateLimit-Policy"))).toEqual({
      "per-minute": { q: 10, w: 60 },
      bucket: { q: 100, w: 60 },
      "in-flight": { q: 3, qu: "concurrent-requests" },
    });
    const limits = members(sent.headers.get("RateLimit"));
    expect(limits["per-minute"]?.r).toBe(9);
    expect(limits["per-minute"]?.t).toBeGreaterThan(0);
    expect(limits["per-minute"]?.t).toBeLessThanOrEqual(60);
    expect(limits.bucket?.r).toBe(4);
    expect(limits.bucket?.t).toBeGreaterThanOrEqual(0);
    expect(limits["in-flight"]).toEqual({ r: 2 });
    // The strictest rule is the one with the least quota left: the concurrency rule (2 of 3).
    expect(sent.headers.get("X-RateLimit-Limit")).toBe("3");
    expect(sent.headers.get("X-RateLimit-Remaining")).toBe("2");
    expect(sent.headers.get("X-RateLimit-Reset")).toMatch(/^\d+$/);
    expect(sent.headers.get("Server-Timing")).toMatch(/^ratelimit;dur=\d+(\.\d+)?/);
  });

  it("answers a denied request with Retry-After ≥ t, no-store and the quota-exceeded problem", async () => {
    const env = makeEnv([perIp(1, { name: "strict", period: "30s" }), perIp(100, { name: "loose" })]);
    // The strict rule's 30 s window is epoch-aligned: both requests must fall in one window.
    await awayFromWindowEdge(30_000, 5_000);
    await send(env, "/", { ip: "198.51.100.6" });
    const denied = await send(env, "/", { ip: "198.51.100.6" });
    expect(denied.status).toBe(429);
    expect(denied.headers.get("Content-Type")).toBe("application/problem+json");
    expect(denied.headers.get("Cache-Control")).toBe("no-store");
    const retryAfter = Number(denied.headers.get("Retry-After"));
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(30);
    const t = members(denied.headers.get("RateLimit")).strict?.t as number;
    expect(retryAfter).toBeGreaterThanOrEqual(t);
    const body = denied.json();
    expect(body).toMatchObject({
      type: "https://iana.org/assignments/http-problem-types#quota-exceeded",
      title: "Too Many Requests",
      status: 429,
      "violated-policies": ["strict"],
      policy: "strict",
      retry_after: retryAfter,
    });
    expect(typeof body.detail).toBe("string");
    // A denied request consumed nothing: the loose rule still shows 99 left, as after the first request.
    expect(members(denied.headers.get("RateLimit")).loose?.r).toBe(99);
  });

  it("stores identities hashed: no raw API key or IP appears in any Redis key", async () => {
    const env = makeEnv([
      { name: "keyed", key: "header:x-api-key", algorithm: "fixed-window", limit: 5, period: "1m" },
      perIp(5),
    ]);
    await send(env, "/", { ip: "198.51.100.77", headers: { "x-api-key": "sk_live_SECRET{*}:x" } });
    const keys = await keysUnder(env.RATE_LIMIT_PREFIX as string);
    expect(keys.length).toBeGreaterThanOrEqual(2);
    for (const key of keys) {
      expect(key).not.toContain("sk_live");
      expect(key).not.toContain("198.51.100.77");
      expect(key).toMatch(new RegExp(`^${env.RATE_LIMIT_PREFIX}:(keyed|per-ip):\\{[A-Za-z0-9_-]{22}\\}$`));
    }
  });
});

describe("cost", () => {
  // An hour: no fixed window turns between a test's requests.
  const rows = {
    name: "rows",
    key: "ip",
    algorithm: "fixed-window",
    limit: 10,
    period: "1h",
    cost: "header:x-rows",
  };

  it("counts the units a header asks for, and one unit when it is absent", async () => {
    const env = makeEnv([rows]);
    const first = await send(env, "/", { ip: "198.51.100.8", headers: { "x-rows": "4" } });
    expect(members(first.headers.get("RateLimit")).rows?.r).toBe(6);
    const second = await send(env, "/", { ip: "198.51.100.8" });
    expect(members(second.headers.get("RateLimit")).rows?.r).toBe(5);
    expect((await send(env, "/", { ip: "198.51.100.8", headers: { "x-rows": "6" } })).status).toBe(429);
  });

  it("rejects a cost that is not a positive integer with a 400 problem", async () => {
    const env = makeEnv([rows]);
    for (const bad of ["0", "-1", "2.5", "lots", "1000000001"]) {
      const sent = await send(env, "/", { ip: "198.51.100.9", headers: { "x-rows": bad } });
      expect(sent.status, bad).toBe(400);
      expect(sent.headers.get("Content-Type")).toBe("application/problem+json");
      expect(sent.json().detail).toContain("x-rows");
    }
  });

  it("denies a cost the rule can never grant, with Retry-After of one full period and an honest `t`", async () => {
    const env = makeEnv([rows]);
    const sent = await send(env, "/", { ip: "198.51.100.10", headers: { "x-rows": "11" } });
    expect(sent.status).toBe(429);
    expect(sent.headers.get("Retry-After")).toBe("3600");
    // The rule is full: more quota comes at no time (`t` = 0, as the contract says of a full rule).
    expect(members(sent.headers.get("RateLimit")).rows).toEqual({ r: 10, t: 0 });
    // Nothing was consumed.
    const after = await send(env, "/", { ip: "198.51.100.10" });
    expect(members(after.headers.get("RateLimit")).rows?.r).toBe(9);
    // Now more quota comes at the window's end, which a second refusal says.
    const again = await send(env, "/", { ip: "198.51.100.10", headers: { "x-rows": "11" } });
    expect(again.headers.get("Retry-After")).toBe("3600");
    const { r, t } = members(again.headers.get("RateLimit")).rows ?? {};
    expect(r).toBe(9);
    expect(t).toBeGreaterThan(0);
    expect(
      Math.abs((t as number) - (members(after.headers.get("RateLimit")).rows?.t as number)),
    ).toBeLessThanOrEqual(1);
  });
});

describe("a cost the rule can never grant", () => {
  it("says in the 429's detail and a problem member that no wait lets it pass; an ordinary denial does not", async () => {
    const env = makeEnv([
      {
        name: "rows",
        key: "ip",
        algorithm: "token-bucket",
        limit: 100,
        period: "1h",
        burst: 10,
        cost: "header:x-rows",
      },
    ]);
    const sent = await send(env, "/", { ip: "198.51.100.13", headers: { "x-rows": "11" } });
    expect(sent.status).toBe(429);
    // The header stays what the README documents (one full period); the body says plainly it never passes.
    expect(sent.headers.get("Retry-After")).toBe("3600");
    const problem = sent.json();
    expect(problem).toMatchObject({ policy: "rows", "cost-exceeds-capacity": ["rows"] });
    expect(problem.detail).toBe(
      'This request can never pass as it is: it costs 11 units and rule "rows" grants at most 10 at once. No wait lets it in; send it with a lower cost.',
    );
    expect(problem.detail).not.toContain("retry in");
    // Ten rows fit the burst; the next request is over the rate and may retry: the usual detail, no member.
    expect((await send(env, "/", { ip: "198.51.100.13", headers: { "x-rows": "10" } })).status).toBe(200);
    const later = await send(env, "/", { ip: "198.51.100.13", headers: { "x-rows": "1" } });
    expect(later.status).toBe(429);
    expect(later.json().detail).toMatch(/^Rate limit "rows" exceeded; retry in \d+ seconds?\.$/);
    expect(later.json()).not.toHaveProperty("cost-exceeds-capacity");
  });
});

describe("the strictest of several denials", () => {
  it("is the one Retry-After comes from, a cost the rule can never grant included", async () => {
    const env = makeEnv([
      {
        name: "rows",
        match: { path: "/rows/*" },
        key: "ip",
        algorithm: "fixed-window",
        limit: 10,
        period: "1h",
        cost: "header:x-rows",
      },
      { name: "burst", key: "ip", algorithm: "fixed-window", limit: 1, period: "1m" },
    ]);
    expect((await send(env, "/other", { ip: "198.51.100.12" })).status).toBe(200);
    // "burst" is spent (free again within a minute); "rows" is full, but 11 rows never fit it.
    const sent = await send(env, "/rows/x", { ip: "198.51.100.12", headers: { "x-rows": "11" } });
    expect(sent.status).toBe(429);
    expect(sent.headers.get("Retry-After")).toBe("3600");
    expect(sent.json()).toMatchObject({ policy: "rows", retry_after: 3600 });
    expect(sent.headers.get("X-RateLimit-Limit")).toBe("10");
  });
});

describe("modes", () => {
  // What `off` saves is the decision: a fresh isolate still reads the live modes once (a switch could turn it on).
  it("off: proxies past the limit with no rate-limit headers, no decision timed and no key written", async () => {
    const env = makeEnv([perIp(1)], { RATE_LIMIT_MODE: "off" });
    for (let i = 0; i < 3; i++) {
      const sent = await send(env, "/", { ip: "198.51.100.11" });
      expect(sent.status).toBe(200);
      expect(sent.headers.get("RateLimit")).toBeNull();
      expect(sent.headers.get("X-RateLimit-Limit")).toBeNull();
      expect(sent.headers.get("Server-Timing")).toBeNull(); // a decision, even a leased one, would be timed
    }
    const keys = await keysUnder(env.RATE_LIMIT_PREFIX as string);
    expect(keys).toEqual([]);
  });

  it("monitor: counts and reports but never blocks", async () => {
    const env = makeEnv([perIp(1)], { RATE_LIMIT_MODE: "monitor" });
    const statuses: number[] = [];
    let last = await send(env, "/", { ip: "198.51.100.12" });
    statuses.push(last.status);
    last = await send(env, "/", { ip: "198.51.100.12" });
    statuses.push(last.status);
    expect(statuses).toEqual([200, 200]);
    expect(members(last.headers.get("RateLimit"))["per-ip"]?.r).toBe(0);
  });

  it("a rule's own mode overrides RATE_LIMIT_MODE", async () => {
    const env = makeEnv([perIp(1, { mode: "on" }), perIp(1, { name: "watch", mode: "monitor" })], {
      RATE_LIMIT_MODE: "off",
    });
    await send(env, "/", { ip: "198.51.100.13" });
    const denied = await send(env, "/", { ip: "198.51.100.13" });
    expect(denied.status).toBe(429);
    expect(denied.json()["violated-policies"]).toEqual(["per-ip"]);
  });
});
