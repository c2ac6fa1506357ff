// The deny cache as a client sees it through the Worker (docs/failure-modes.md): what a 429 answered from
// isolate memory carries, and what it never outlives.
import { type Item, parseList } from "structured-headers";
import { describe, expect, it } from "vitest";
import { awayFromWindowEdge } from "../support/window-edge";
import { call, makeEnv, send, uniquePrefix } from "./admin-harness";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A proxied request from `ip`, its body read. */
async function request(testEnv: Record<string, unknown>, ip: string, headers: Record<string, string> = {}) {
  const response = await call(testEnv, "/deny-cache", { ip, headers });
  await response.text();
  return response;
}

/** A structured-field list parsed with a real parser, as `{ name: params }`. */
function members(field: string | null): Record<string, Record<string, unknown>> {
  expect(field).not.toBeNull();
  const out: Record<string, Record<string, unknown>> = {};
  for (const member of parseList(field as string)) {
    const [name, params] = member as Item;
    out[name as string] = Object.fromEntries(params);
  }
  return out;
}

describe("deny cache", () => {
  it("answers a repeated 429 with a RateLimit member for every matched rule, as Redis's own 429 had", async () => {
    const testEnv = makeEnv(uniquePrefix("deny-members"), [
      { name: "m-a", key: "ip", algorithm: "fixed-window", limit: 5, period: "1h" },
      { name: "m-b", key: "header:x-k", algorithm: "fixed-window", limit: 1, period: "1h" },
    ]);
    await awayFromWindowEdge(3_600_000, 10_000);
    const both = () => request(testEnv, "198.51.100.41", { "x-k": "KK" });
    expect((await both()).status).toBe(200);
    const byRedis = await both();
    expect(byRedis.status).toBe(429);
    expect(byRedis.headers.get("Server-Timing")).not.toMatch(/desc=/);
    const fromCache = await both();
    expect(fromCache.status).toBe(429);
    expect(fromCache.headers.get("Server-Timing")).toMatch(/desc="deny_cache"/);

    const policy = { "m-a": { q: 5, w: 3600 }, "m-b": { q: 1, w: 3600 } };
    expect(members(byRedis.headers.get("RateLimit-Policy"))).toEqual(policy);
    expect(members(fromCache.headers.get("RateLimit-Policy"))).toEqual(policy);
    const redisSaid = members(byRedis.headers.get("RateLimit"));
    const cacheSays = members(fromCache.headers.get("RateLimit"));
    expect(Object.keys(cacheSays)).toEqual(["m-a", "m-b"]);
    // m-a as Redis reported it with the denial (which consumed nothing): 4 left; its `t` counted down.
    expect(cacheSays["m-a"]?.r).toBe(4);
    expect(cacheSays["m-b"]?.r).toBe(0);
    for (const rule of ["m-a", "m-b"]) {
      expect(cacheSays[rule]?.t).toBeGreaterThan(0);
      expect(cacheSays[rule]?.t).toBeLessThanOrEqual(redisSaid[rule]?.t as number);
    }
    expect(fromCache.headers.get("X-RateLimit-Limit")).toBe("1");
    expect(Number(fromCache.headers.get("Retry-After"))).toBeGreaterThanOrEqual(
      cacheSays["m-b"]?.t as number,
    );
  });

  it("lets a client in as soon as its override's ttl ends, though the denial under it had longer to run", async () => {
    const testEnv = makeEnv(uniquePrefix("deny-ovr"), [
      { name: "fw", key: "ip", algorithm: "fixed-window", limit: 3, period: "10s" },
    ]);
    const ip = "198.51.100.40";
    // One window for the whole test: the override's 2 s, the wait for its expiry, and a margin.
    await awayFromWindowEdge(10_000, 7_000);
    const put = await send(testEnv, "PUT", `/__floodgate/overrides/fw/${ip}`, { limit: 1, ttl: 2 });
    expect(put.status).toBe(200);

    expect((await request(testEnv, ip)).status).toBe(200);
    const denied = await request(testEnv, ip);
    expect(denied.status).toBe(429);
    expect(denied.headers.get("RateLimit-Policy")).toBe('"fw";q=1;w=10');
    // The denial's retry time reaches past the override's end: a cached denial would still answer below.
    expect(Number(denied.headers.get("Retry-After"))).toBeGreaterThanOrEqual(5);

    while ((await call(testEnv, `/__floodgate/overrides/fw/${ip}`)).status !== 404) await sleep(100);
    const after = await request(testEnv, ip);
    expect(after.status).toBe(200);
    expect(after.headers.get("RateLimit-Policy")).toBe('"fw";q=3;w=10');
    expect(after.headers.get("RateLimit")).toMatch(/^"fw";r=1;t=\d+$/);
    expect(after.headers.get("Server-Timing")).not.toMatch(/desc=/);
  });
});
