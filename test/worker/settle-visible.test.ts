// What an operator sees of settlements and give-backs (docs/settle.md, "Seeing it"), through the Worker: an
// Analytics Engine data point and a log line per settled request carrying the units, GET /__floodgate/keys with
// the identity's last settlement and the reset instant, and the dashboard's per-rule settlement counts.
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { hashIdentity } from "../../src/engine/keys";
import type { Env } from "../../src/env";
import worker from "../../src/worker";
import { ADMIN_TOKEN, call, makeEnv, uniquePrefix } from "./admin-harness";

// The echo origin answers JSON with the request's `bodyLength`: a request's real cost is its body's bytes.
const RULES = [
  {
    name: "bytes",
    match: { path: "/upload" },
    key: "header:x-api-key",
    algorithm: "fixed-window",
    limit: 1000,
    period: "1h",
    settle: "json:bodyLength",
  },
  {
    name: "login",
    match: { path: "/login" },
    key: "header:x-api-key",
    algorithm: "fixed-window",
    limit: 5,
    period: "1h",
    count: { status: ["401"] },
  },
];

function dataset() {
  const points: AnalyticsEngineDataPoint[] = [];
  return {
    points,
    binding: { writeDataPoint: (point: AnalyticsEngineDataPoint) => void points.push(point) },
  };
}

/** A request through the Worker, its body read to the end before the background work is waited for. */
async function through(env: Record<string, unknown>, path: string, init: RequestInit): Promise<Response> {
  const ctx = createExecutionContext();
  const response = await worker.fetch(new Request(`http://floodgate.test${path}`, init), env as Env, ctx);
  const body = await response.text();
  await waitOnExecutionContext(ctx);
  return new Response(body, response);
}

afterEach(() => vi.restoreAllMocks());

describe("settlements an operator can see", () => {
  it("a settled request's data point, log line, GET /keys and dashboard carry its units", async () => {
    const lines: string[] = [];
    vi.spyOn(console, "log").mockImplementation((line: unknown) => void lines.push(String(line)));
    const analytics = dataset();
    const env = makeEnv(uniquePrefix("settle-visible"), RULES, { RATE_LIMIT_ANALYTICS: analytics.binding });
    const key = `key-${crypto.randomUUID()}`;

    // Reserved 1 (the default cost), the origin says 40: 39 more charged after the response.
    const sent = await through(env, "/upload", {
      method: "POST",
      headers: { "x-api-key": key },
      body: "x".repeat(40),
    });
    expect(sent.status).toBe(200);
    expect(((await sent.json()) as { bodyLength: number }).bodyLength).toBe(40);

    const settled = analytics.points.find((p) => p.blobs?.[1] === "settled");
    expect(settled).toMatchObject({ indexes: ["bytes"] });
    expect(settled?.blobs?.slice(0, 8)).toEqual([
      "bytes",
      "settled",
      "on",
      "redis",
      "",
      "fixed-window",
      "POST",
      "",
    ]);
    const [latencyMs, limit, remaining, retry, reserved, applied, cost] = settled?.doubles ?? [];
    expect(latencyMs).toBeGreaterThanOrEqual(0);
    expect([limit, remaining, retry, reserved, applied, cost]).toEqual([1000, 960, 0, 1, 39, 40]);

    const hash = await hashIdentity(key);
    const line = lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.event === "ratelimit.settled");
    expect(line).toMatchObject({
      method: "POST",
      status: 200,
      rules: [
        {
          rule: "bytes",
          outcome: "settled",
          identity: `hash:${hash}`,
          reserved: 1,
          cost: 40,
          applied: 39,
          remaining: 960,
        },
      ],
    });
    expect(JSON.stringify([lines, analytics.points])).not.toContain(key);

    const state = (await (await call(env, `/__floodgate/keys/bytes/${key}`)).json()) as Record<
      string,
      unknown
    >;
    expect(state).toMatchObject({
      remaining: 960,
      settlement: {
        count: null,
        settle: "json:bodyLength",
        last: { outcome: "settled", reserved: 1, cost: 40, applied: 39, remaining: 960 },
      },
    });
    // The window's end as an instant: within the hour, on a whole hour.
    const resetAt = Date.parse(String(state.reset_at));
    expect(resetAt).toBeGreaterThan(Date.now());
    expect(resetAt).toBeLessThanOrEqual(Date.now() + 3_600_000);

    const data = (await (await call(env, "/__floodgate/dashboard.json")).json()) as {
      rules: Array<{ name: string; settlement?: Record<string, number> }>;
    };
    expect(data.rules.find((r) => r.name === "bytes")?.settlement).toEqual({
      settled: 1,
      kept: 0,
      reserved: 1,
      charged: 39,
      givenBack: 0,
    });
    const signedIn = await call(env, "/__floodgate/login", {
      method: "POST",
      token: null,
      headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "http://floodgate.test" },
      body: new URLSearchParams({ token: ADMIN_TOKEN }),
    });
    const cookie = (signedIn.headers.get("Set-Cookie") ?? "").split(";")[0] as string;
    const page = await (
      await call(env, "/__floodgate/", { token: null, headers: { Cookie: cookie } })
    ).text();
    expect(page).toContain('data-field="settlement.charged">39<');
  });

  it("a status a rule does not count: its unit given back shows as given-back, with no log line", async () => {
    const lines: string[] = [];
    vi.spyOn(console, "log").mockImplementation((line: unknown) => void lines.push(String(line)));
    const analytics = dataset();
    const env = makeEnv(uniquePrefix("settle-visible"), RULES, { RATE_LIMIT_ANALYTICS: analytics.binding });
    const key = `key-${crypto.randomUUID()}`;

    const ok = await through(env, "/login", { headers: { "x-api-key": key, "x-password": "correct horse" } });
    expect(ok.status).toBe(200);
    const back = analytics.points.find((p) => p.blobs?.[1] === "given-back");
    expect(back?.blobs?.[0]).toBe("login");
    expect(back?.doubles?.slice(4, 7)).toEqual([1, -1, 0]);
    expect(lines.filter((l) => l.includes("ratelimit.settled"))).toEqual([]);

    // A wrong password is counted: nothing moves after the response.
    const wrong = await through(env, "/login", { headers: { "x-api-key": key, "x-password": "nope" } });
    expect(wrong.status).toBe(401);
    expect(analytics.points.filter((p) => p.blobs?.[1] === "given-back")).toHaveLength(1);

    const state = (await (await call(env, `/__floodgate/keys/login/${key}`)).json()) as Record<
      string,
      unknown
    >;
    expect(state).toMatchObject({
      remaining: 4,
      settlement: {
        count: ["401"],
        settle: null,
        last: { outcome: "given-back", reserved: 1, applied: -1, cost: 0 },
      },
    });
    // The admin token was used; no other header of the client reached the answer.
    expect(JSON.stringify(state)).not.toContain(ADMIN_TOKEN);
  });

  it("GET /keys says when a calendar period resets, as an instant: the next local midnight", async () => {
    const env = makeEnv(uniquePrefix("settle-visible"), [
      {
        name: "daily",
        key: "header:x-api-key",
        algorithm: "fixed-window",
        limit: 100,
        period: "calendar:day",
        timezone: "Asia/Kolkata",
      },
    ]);
    const key = `key-${crypto.randomUUID()}`;
    expect((await through(env, "/things", { headers: { "x-api-key": key } })).status).toBe(200);
    const state = (await (await call(env, `/__floodgate/keys/daily/${key}`)).json()) as Record<
      string,
      unknown
    >;
    // Kolkata is UTC+05:30 all year: its midnight is 18:30 UTC, within the next day.
    const resetAt = String(state.reset_at);
    expect(resetAt).toMatch(/T18:30:00\.000Z$/);
    expect(Date.parse(resetAt) - Date.now()).toBeGreaterThan(0);
    expect(Date.parse(resetAt) - Date.now()).toBeLessThanOrEqual(86_400_000);
    expect(state).not.toHaveProperty("settlement");
  });
});
