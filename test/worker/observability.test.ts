import { afterEach, describe, expect, it, vi } from "vitest";
import { hashIdentity } from "../../src/engine/keys";
import { ADMIN_TOKEN, baseEnv, call, makeEnv } from "./admin-harness";

const PREFIX = "t-observability";
// An hour: no epoch-aligned window turns between a test's requests.
const RULES = [
  { name: "strict", key: "header:x-api-key", algorithm: "fixed-window", limit: 1, period: "1h" },
  { name: "watch", key: "ip", algorithm: "sliding-window", limit: 1, period: "1h", mode: "monitor" },
];

// Miniflare's local Analytics Engine accepts writes but offers no way to read them back, so the dataset is
// a test-local stand-in with the same `writeDataPoint` signature, passed as the binding.
function dataset() {
  const points: AnalyticsEngineDataPoint[] = [];
  return {
    points,
    binding: { writeDataPoint: (point: AnalyticsEngineDataPoint) => void points.push(point) },
  };
}

const request = (env: Record<string, unknown>, apiKey: string, ip: string) =>
  call(env, "/things?token=secret-query", { headers: { "x-api-key": apiKey }, ip });

afterEach(() => vi.restoreAllMocks());

describe("observability", () => {
  it("writes one Analytics Engine data point per rule decided: rule, verdict, mode, source, latency", async () => {
    const analytics = dataset();
    const env = makeEnv(`${PREFIX}-ae`, RULES, { RATE_LIMIT_ANALYTICS: analytics.binding });

    expect((await request(env, "key-ae", "203.0.113.1")).status).toBe(200);
    expect(analytics.points).toHaveLength(2);
    const [strict, watch] = analytics.points;
    expect(strict).toMatchObject({
      indexes: ["strict"],
      blobs: ["strict", "allowed", "on", "redis", "", "fixed-window", "GET", ""],
    });
    expect(watch).toMatchObject({
      indexes: ["watch"],
      blobs: ["watch", "allowed", "monitor", "redis", "", "sliding-window", "GET", ""],
    });
    const [latencyMs, limit, remaining, retryAfterMs] = strict?.doubles ?? [];
    expect(latencyMs).toBeGreaterThanOrEqual(0);
    expect(latencyMs).toBeLessThan(5000);
    expect([limit, remaining, retryAfterMs]).toEqual([1, 0, 0]);

    // Another client from the same IP: the monitor rule would deny (it is over), the enforcing one allows.
    expect((await request(env, "key-ae-2", "203.0.113.1")).status).toBe(200);
    expect(analytics.points[3]?.blobs?.slice(0, 3)).toEqual(["watch", "would-deny", "monitor"]);

    // The first client again, from a fresh IP: denied by the enforcing rule.
    expect((await request(env, "key-ae", "203.0.113.2")).status).toBe(429);
    expect(analytics.points[4]?.blobs?.slice(0, 3)).toEqual(["strict", "denied", "on"]);
    expect(analytics.points[4]?.doubles?.[3]).toBeGreaterThan(0);

    // Nothing about the client itself is written.
    const written = JSON.stringify(analytics.points);
    for (const secret of ["key-ae", "203.0.113", await hashIdentity("key-ae"), "secret-query"]) {
      expect(written).not.toContain(secret);
    }
  });

  it("writes nothing for admin requests, which are never rate-limited", async () => {
    const analytics = dataset();
    const env = makeEnv(`${PREFIX}-admin`, RULES, { RATE_LIMIT_ANALYTICS: analytics.binding });
    await call(env, "/__floodgate/rules");
    await call(env, "/__floodgate/health");
    expect(analytics.points).toHaveLength(0);
  });

  it("logs one JSON line per denial and per monitor would-deny, with no raw identity or token", async () => {
    const lines: string[] = [];
    vi.spyOn(console, "log").mockImplementation((line: unknown) => void lines.push(String(line)));
    const env = makeEnv(`${PREFIX}-log`, RULES);

    await request(env, "key-log", "198.51.100.1"); // allowed by both: no line
    expect(lines).toHaveLength(0);
    await request(env, "key-log-2", "198.51.100.1"); // monitor rule over: would-deny
    await request(env, "key-log", "198.51.100.2"); // enforcing rule over: denied
    expect(lines).toHaveLength(2);

    const [wouldDeny, denied] = lines.map((line) => JSON.parse(line));
    expect(wouldDeny).toMatchObject({
      event: "ratelimit.would_deny",
      method: "GET",
      rules: [
        {
          rule: "watch",
          verdict: "would-deny",
          mode: "monitor",
          identity: `hash:${await hashIdentity("198.51.100.1")}`,
        },
      ],
    });
    expect(denied).toMatchObject({
      event: "ratelimit.denied",
      rules: [
        {
          rule: "strict",
          verdict: "denied",
          mode: "on",
          identity: `hash:${await hashIdentity("key-log")}`,
          remaining: 0,
        },
      ],
    });
    expect(denied.request_id).toEqual(expect.any(String));
    expect(denied.rules[0].retry_after_ms).toBeGreaterThan(0);

    const logged = lines.join("\n");
    for (const secret of [
      'key-log"',
      "198.51.100",
      "secret-query",
      ADMIN_TOKEN,
      String(baseEnv.UPSTASH_REDIS_REST_TOKEN),
    ]) {
      expect(logged).not.toContain(secret);
    }
  });

  it("runs without the binding", async () => {
    const env = makeEnv(`${PREFIX}-none`, RULES);
    expect((await request(env, "key-none", "192.0.2.1")).status).toBe(200);
  });
});
