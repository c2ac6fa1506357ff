// Guessing the admin token is slowed: after 10 wrong tries from one client (an IP, an IPv6 /64) in a minute,
// that client's admin requests are answered 429 with Retry-After until the minute is over, whatever token they
// carry; other clients are not affected. On the real Worker; the counts live in the isolate (docs/security.md).
import { describe, expect, it } from "vitest";
import { ADMIN_TOKEN, baseEnv, call, makeEnv } from "./admin-harness";

const RULES = [{ name: "api", key: "header:x-api-key", algorithm: "gcra", limit: 2, period: "1h" }];
const freshEnv = () =>
  makeEnv(`t-throttle-${crypto.randomUUID().slice(0, 8)}`, RULES, { ORIGIN_URL: baseEnv.ORIGIN_URL });

describe("wrong admin tokens", () => {
  it("are answered 429 with Retry-After after 10 from one client in a minute, the right token too", async () => {
    const testEnv = freshEnv();
    const statuses: number[] = [];
    let denied: Response | undefined;
    for (let i = 0; i < 1200; i++) {
      const response = await call(testEnv, "/__floodgate/rules", {
        token: `wrong-token-${i}-0123456789`,
        ip: "192.0.2.50",
      });
      statuses.push(response.status);
      if (response.status === 429) denied ??= response;
      else await response.arrayBuffer();
    }
    expect(statuses.slice(0, 10)).toEqual(new Array(10).fill(401));
    expect(statuses.slice(10).every((status) => status === 429)).toBe(true);
    if (!denied) throw new Error("expected a 429");
    expect(Number(denied.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
    expect(Number(denied.headers.get("Retry-After"))).toBeLessThanOrEqual(60);
    expect(denied.headers.get("Content-Type")).toBe("application/problem+json");
    expect(await denied.text()).not.toContain("wrong-token");
    // While blocked, the right token gets no answer about itself either.
    expect((await call(testEnv, "/__floodgate/rules", { ip: "192.0.2.50" })).status).toBe(429);
    // Another client, and the same client's neighbours outside its /64, are not held up.
    expect((await call(testEnv, "/__floodgate/rules", { ip: "192.0.2.51" })).status).toBe(200);
    expect(
      (await call(testEnv, "/__floodgate/rules", { token: "wrong-0123456789abc", ip: "192.0.2.52" })).status,
    ).toBe(401);
  });

  it("count from an IPv6 /64 as one client, and through the sign-in form too", async () => {
    const testEnv = freshEnv();
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const response = await call(testEnv, "/__floodgate/login", {
        method: "POST",
        token: null,
        ip: `2001:db8:7:7::${(i + 1).toString(16)}`,
        headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "http://floodgate.test" },
        body: new URLSearchParams({ token: `wrong-${i}` }),
      });
      await response.arrayBuffer();
      statuses.push(response.status);
    }
    expect(statuses).toEqual([...new Array(10).fill(401), 429, 429]);
    // A right sign-in from elsewhere still works.
    const other = await call(testEnv, "/__floodgate/login", {
      method: "POST",
      token: null,
      ip: "2001:db8:8::1",
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "http://floodgate.test" },
      body: new URLSearchParams({ token: ADMIN_TOKEN }),
    });
    expect(other.status).toBe(303);
  });

  it("never hold up health, which needs no token", async () => {
    const testEnv = freshEnv();
    for (let i = 0; i < 12; i++) {
      await (
        await call(testEnv, "/__floodgate/rules", { token: `wrong-${i}-0123456789`, ip: "192.0.2.60" })
      ).arrayBuffer();
    }
    expect((await call(testEnv, "/__floodgate/health", { token: null, ip: "192.0.2.60" })).status).toBe(200);
  });
});
