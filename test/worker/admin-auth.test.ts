import { describe, expect, it } from "vitest";
import { ADMIN_TOKEN, baseEnv, call, makeEnv } from "./admin-harness";

const RULES = [{ name: "api", key: "header:x-api-key", algorithm: "fixed-window", limit: 3, period: "1m" }];
const withToken = makeEnv("t-admin-auth", RULES);
const { RATE_LIMIT_ADMIN_TOKEN: _, ...withoutToken } = withToken;

async function expectProblem(response: Response, status: number) {
  expect(response.status).toBe(status);
  expect(response.headers.get("Content-Type")).toBe("application/problem+json");
  const body = (await response.json()) as { status: number; title: string; detail: string };
  expect(body.status).toBe(status);
  expect(body.detail).toEqual(expect.any(String));
  return body;
}

describe("the admin API's gate", () => {
  it("is off (404) when RATE_LIMIT_ADMIN_TOKEN is not set, even with a bearer token", async () => {
    for (const path of ["/__floodgate/rules", "/__floodgate/overrides/api", "/__floodgate/nope"]) {
      const body = await expectProblem(await call(withoutToken, path), 404);
      expect(body.detail).toContain("RATE_LIMIT_ADMIN_TOKEN");
    }
  });

  it("serves /health without a token, whether or not the admin API is on", async () => {
    for (const testEnv of [withoutToken, withToken]) {
      const response = await call(testEnv, "/__floodgate/health", { token: null });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { status: string; breaker: string };
      expect(["ok", "degraded"]).toContain(body.status);
      expect(["closed", "open", "half-open"]).toContain(body.breaker);
    }
  });

  it("tells no secrets in /health", async () => {
    const text = await (await call(withToken, "/__floodgate/health", { token: null })).text();
    expect(text).not.toContain(baseEnv.UPSTASH_REDIS_REST_TOKEN);
    expect(text).not.toContain(baseEnv.UPSTASH_REDIS_REST_URL);
    expect(text).not.toContain(ADMIN_TOKEN);
  });

  it("answers 401 problem+json to a request without a token", async () => {
    const response = await call(withToken, "/__floodgate/rules", { token: null });
    await expectProblem(response, 401);
    expect(response.headers.get("WWW-Authenticate")).toMatch(/^Bearer/);
  });

  it("answers 401 to a wrong token, including one that shares the real token's prefix", async () => {
    for (const token of ["wrong", `${ADMIN_TOKEN}x`, ADMIN_TOKEN.slice(0, -1), ""]) {
      await expectProblem(await call(withToken, "/__floodgate/rules", { token }), 401);
    }
  });

  it("answers 401 for a token sent any other way than Bearer", async () => {
    const response = await call(withToken, "/__floodgate/rules", {
      token: null,
      headers: { Authorization: `Basic ${btoa(`admin:${ADMIN_TOKEN}`)}` },
    });
    await expectProblem(response, 401);
  });

  it("says 401 before 404 for an unknown admin path, and 404 once authorized", async () => {
    await expectProblem(await call(withToken, "/__floodgate/secret-endpoint", { token: null }), 401);
    await expectProblem(await call(withToken, "/__floodgate/secret-endpoint", { token: "wrong" }), 401);
    await expectProblem(await call(withToken, "/__floodgate/secret-endpoint"), 404);
    await expectProblem(await call(withToken, "/__floodgate/rules", { method: "DELETE" }), 404);
    // GET of the prefix itself is the dashboard (its sign-in form without a session); nothing else is there.
    for (const path of ["/__floodgate", "/__floodgate/"]) {
      await expectProblem(await call(withToken, path, { method: "DELETE", token: null }), 401);
      await expectProblem(await call(withToken, path, { method: "DELETE" }), 404);
    }
  });

  it("lets the right token through", async () => {
    const response = await call(withToken, "/__floodgate/rules");
    expect(response.status).toBe(200);
    expect(response.headers.get("Cache-Control")).toBe("no-store");
  });
});
