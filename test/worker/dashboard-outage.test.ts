// The dashboard during a Redis outage, the moment operators need it most: the page and its refreshes still
// answer, list every rule with empty counts, and say in the health strip that Redis is unreachable.
import { describe, expect, it } from "vitest";
import { ADMIN_TOKEN, call, makeEnv } from "./admin-harness";

const RULES = [
  { name: "api", key: "header:x-api-key", algorithm: "gcra", limit: 2, period: "1h" },
  { name: "per-ip", key: "ip", algorithm: "token-bucket", limit: 5, period: "1m", mode: "monitor" },
];
const ORIGIN = "http://floodgate.test";
// Nothing listens on port 9 (discard): every Redis call fails at once.
const redisDown = () =>
  makeEnv(`t-dash-down-${crypto.randomUUID().slice(0, 8)}`, RULES, {
    UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
  });

interface Data {
  health: { status: string; redis: { reachable: boolean } };
  rules: Array<{ name: string; algorithm: string; mode: { effective: string }; last5m: { allowed: number } }>;
}

describe("the dashboard while Redis is unreachable", () => {
  it("still serves the page with every rule, empty counts and degraded health", async () => {
    const testEnv = redisDown();
    // Signing in needs no Redis: the session is an HMAC under the admin token.
    const login = await call(testEnv, "/__floodgate/login", {
      method: "POST",
      token: null,
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: ORIGIN },
      body: new URLSearchParams({ token: ADMIN_TOKEN }),
    });
    expect(login.status).toBe(303);
    const cookie = (login.headers.get("Set-Cookie") ?? "").split(";")[0] as string;

    const response = await call(testEnv, "/__floodgate/", { token: null, headers: { Cookie: cookie } });
    expect(response.status).toBe(200);
    const html = await response.text();
    for (const rule of RULES) {
      expect(html).toContain(`data-rule="${rule.name}"`);
      expect(html).toContain(`<dd data-field="algorithm">${rule.algorithm}</dd>`);
    }
    expect(html).toContain('<td data-field="last5m.allowed">0</td>');
    expect(html).toContain('<dd data-field="health.status" class="status-degraded">degraded</dd>');
    expect(html).toContain('<dd data-field="health.redis">unreachable</dd>');
    // The configured mode still shows (no live switch could be read).
    expect(html).toContain('<span data-field="mode">monitor</span>');
  });

  it("still answers dashboard.json, so an open page keeps refreshing", async () => {
    const response = await call(redisDown(), "/__floodgate/dashboard.json");
    expect(response.status).toBe(200);
    const data = await response.json<Data>();
    expect(data.health).toMatchObject({ status: "degraded", redis: { reachable: false } });
    expect(data.rules.map((r) => [r.name, r.algorithm, r.mode.effective, r.last5m.allowed])).toEqual([
      ["api", "gcra", "on", 0],
      ["per-ip", "token-bucket", "monitor", 0],
    ]);
  });
});
