import { describe, expect, it, vi } from "vitest";
import { healthOfEndpoints } from "../../src/admin/health";
import { createRedisPort } from "../../src/engine/redis";
import { DECIDE } from "../../src/engine/script";
import type { DeciderHealth } from "../../src/resilience/decider";
import { ADMIN_TOKEN, baseEnv, call, makeEnv } from "./admin-harness";

const RULES = [{ name: "api", key: "header:x-api-key", algorithm: "fixed-window", limit: 100, period: "1m" }];

interface Health {
  status: "ok" | "degraded";
  redis: { reachable: boolean; credentials: string; latencyMs: number | null };
  script: { loaded: boolean | null };
  breaker: "closed" | "open" | "half-open";
  breakerRemainingMs: number;
}
const health = async (env: Record<string, unknown>) => {
  const response = await call(env, "/__floodgate/health", { token: null });
  expect(response.status).toBe(200);
  expect(response.headers.get("Cache-Control")).toBe("no-store");
  const text = await response.text();
  // Served without a token: nothing secret in it, healthy or not.
  for (const secret of [
    ADMIN_TOKEN,
    String(baseEnv.UPSTASH_REDIS_REST_TOKEN),
    "wrong-rest-token",
    "127.0.0.1",
  ]) {
    expect(text).not.toContain(secret);
  }
  return JSON.parse(text) as Health;
};

describe("GET /__floodgate/health", () => {
  it("is ok when Redis answers, the script is loaded and the breaker is closed", async () => {
    const env = makeEnv("t-health-ok", RULES);
    expect((await call(env, "/x", { ip: "192.0.2.10" })).status).toBe(200); // loads the script
    const report = await health(env);
    expect(report).toMatchObject({
      status: "ok",
      redis: { reachable: true, credentials: "accepted" },
      script: { loaded: true },
      breaker: "closed",
      breakerRemainingMs: 0,
    });
    // Reported only with RATE_LIMIT_JWKS_URL set (test/node/jwks-outage.test.ts).
    expect(report).not.toHaveProperty("jwks");
  });

  it("is degraded, naming no secret, when Redis rejects the token", async () => {
    const env = makeEnv("t-health-auth", RULES, { UPSTASH_REDIS_REST_TOKEN: "wrong-rest-token" });
    expect(await health(env)).toMatchObject({ status: "degraded", redis: { credentials: "rejected" } });
  });

  it("is degraded when Redis is unreachable, and shows the breaker open after failed decisions", async () => {
    const env = makeEnv("t-health-down", RULES, { UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9" });
    expect(await health(env)).toMatchObject({
      status: "degraded",
      redis: { reachable: false },
      script: { loaded: null },
    });
    // Fail-open rules keep serving while Redis is down; five failures in a row open the breaker.
    for (let i = 0; i < 6; i++) expect((await call(env, "/x", { ip: "192.0.2.11" })).status).toBe(200);
    const report = await health(env);
    expect(report).toMatchObject({ status: "degraded", breaker: "open" });
    expect(report.breakerRemainingMs).toBeGreaterThan(0);
  });

  it("sends one probe for checks that arrive while it is in flight, however many there are", async () => {
    // A port of its own: the probe cache is per port, as it is per isolate in production.
    const client = createRedisPort({
      url: baseEnv.UPSTASH_REDIS_REST_URL,
      token: baseEnv.UPSTASH_REDIS_REST_TOKEN,
      timeoutMs: 5000,
    });
    const probes = vi.spyOn(client, "pipeline"); // the probe is one pipeline: PING + SCRIPT EXISTS
    const decider: DeciderHealth = {
      status: "ok",
      breaker: "closed",
      breakerRemainingMs: 0,
      consecutiveFailures: 0,
      lastFailure: null,
      credentials: "unknown",
      errors: { timeout: 0, unavailable: 0, auth: 0, script: 0 },
      breakerOpens: 0,
    };
    const reports = await Promise.all(
      Array.from({ length: 8 }, () => healthOfEndpoints([client], () => DECIDE.sha(), [decider])),
    );
    expect(probes).toHaveBeenCalledTimes(1);
    for (const report of reports) expect(report).toEqual(reports[0]);
    expect(reports[0]).toMatchObject({ status: "ok", redis: { reachable: true, credentials: "accepted" } });
  });
});
