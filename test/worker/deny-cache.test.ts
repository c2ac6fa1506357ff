// The deny cache as a client sees it through the Worker (README "When things fail"): what a 429 answered from
// isolate memory carries, and what it never outlives.
import { describe, expect, it } from "vitest";
import { awayFromWindowEdge } from "../support/window-edge";
import { call, makeEnv, send, uniquePrefix } from "./admin-harness";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A proxied request from `ip`, its body read. */
async function request(testEnv: Record<string, unknown>, ip: string) {
  const response = await call(testEnv, "/deny-cache", { ip });
  await response.text();
  return response;
}

describe("deny cache", () => {
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
