// A JWKS that hangs, fails or is slow, in front of the real Worker (bundled, in workerd) and the npm
// middleware: a request waits for it at most the decision budget, the fetch goes on and serves the requests
// after it, a JWKS that failed is not asked again by every request, and a token that cannot be checked is not
// the client's fault (never a 401), so each rule's failure policy answers, and health says so until the JWKS
// is back. Nothing on the wire or in the logs shows the JWKS URL (it may carry a secret).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Hono } from "hono";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { joseVerifier } from "../../src/jwt";
import { rateLimit } from "../../src/middleware";
import { startWorker } from "../support/miniflare-worker.mjs";

/** A path segment standing for a secret in the JWKS URL (a signed or tokened address). */
const URL_SECRET = `s3cret-${crypto.randomUUID()}`;
const BUDGET_MS = 300;
/** jose's own default wait for a JWKS: a request must not come near it. */
const JOSE_DEFAULT_MS = 5000;

let jwks: Server;
let jwksBase: string;
/** How long the `slow` JWKS takes to answer: longer than a request's budget. */
const SLOW_MS = 3 * BUDGET_MS;
/** Requests the JWKS server received, per kind (`hang`, `error`, `slow`, `flaky`). */
const hits = new Map<string, number>();
let token: string;
/** The public key set the tokens verify against (`slow` serves it, and `flaky` while it is up). */
let keySet: string;
/** Whether the `flaky` JWKS serves the key set; while it is down, it errs. */
let flakyUp = false;

beforeAll(async () => {
  jwks = createServer((req: IncomingMessage, res: ServerResponse) => {
    const kind = ["hang", "slow", "flaky"].find((k) => req.url?.includes(`/${k}/`)) ?? "error";
    hits.set(kind, (hits.get(kind) ?? 0) + 1);
    if (kind === "error" || (kind === "flaky" && !flakyUp)) {
      res.writeHead(500, { "content-type": "text/plain" });
      res.end("internal error");
    } else if (kind === "flaky") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(keySet);
    } else if (kind === "slow") {
      setTimeout(() => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(keySet);
      }, SLOW_MS);
    }
    // "hang": never answers; the socket is closed when the server closes.
  });
  await new Promise<void>((resolve) => jwks.listen(0, "127.0.0.1", resolve));
  jwksBase = `http://127.0.0.1:${(jwks.address() as AddressInfo).port}/${URL_SECRET}`;
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  keySet = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: "k1", alg: "RS256" }] });
  token = await new SignJWT({ sub: "alice" })
    .setProtectedHeader({ alg: "RS256", kid: "k1" })
    .setExpirationTime("10m")
    .sign(privateKey);
});

afterAll(async () => {
  jwks?.closeAllConnections();
  await new Promise((resolve) => jwks?.close(resolve));
});

const rule = (extra: Record<string, unknown>) => ({
  name: "per-user",
  key: "jwt:sub",
  algorithm: "fixed-window",
  limit: 2,
  period: "1h",
  ...extra,
});

const workerBindings = (jwksUrl: string, rules: unknown[]) => ({
  ORIGIN_URL: inject("originUrl"),
  UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
  UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
  RATE_LIMIT_PREFIX: `jwks-${crypto.randomUUID().slice(0, 8)}`,
  RATE_LIMIT_TIMEOUT_MS: String(BUDGET_MS),
  RATE_LIMIT_JWKS_URL: jwksUrl,
  RATE_LIMIT_RULES: JSON.stringify(rules),
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("an unreachable JWKS", () => {
  it("costs a request at most the budget, is not asked again for a few seconds, and a fail-open rule counts by IP instead of denying", async () => {
    const worker = await startWorker({
      bindings: workerBindings(`${jwksBase}/hang/jwks.json`, [rule({ missing: "deny" })]),
    });
    try {
      const send = async () => {
        const started = performance.now();
        const response = await worker.fetch("/", {
          headers: { Authorization: `Bearer ${token}`, "CF-Connecting-IP": "203.0.113.9" },
        });
        const body = await response.text();
        const timing = response.headers.get("Server-Timing");
        return { status: response.status, body, timing, ms: performance.now() - started };
      };
      const first = await send();
      // Not a 401: the token may well be valid. The rule fails open, so the request goes on, counted by IP.
      expect(first.status).toBe(200);
      expect(first.ms).toBeLessThan(JOSE_DEFAULT_MS / 2);
      // Decided by Redis, but not as the rule says: the degraded answer says why.
      expect(first.timing).toMatch(/^ratelimit;dur=[\d.]+;desc="jwks_unavailable"$/);
      const second = await send();
      expect(second.status).toBe(200);
      // The limit of 2 still holds, by the client's IP: the rule was decided, not skipped.
      const third = await send();
      expect(third.status).toBe(429);
      expect(third.timing).toMatch(/;desc="jwks_unavailable"$/);
      const denied = worker.logs.find((line) => line.includes('"event":"ratelimit.denied"'));
      expect(denied).toContain('"source":"redis","reason":"jwks_unavailable"');
      expect(hits.get("hang")).toBe(1); // the 2nd and 3rd sent no fetch beside the one on its way
      expect(second.ms + third.ms).toBeLessThan(JOSE_DEFAULT_MS / 2);

      // The fetch gives up after jose's own 5 s: one log line, and no fetch for 5 s more.
      const logged = async () => worker.logs.join("\n").includes("could not be fetched");
      for (let i = 0; i < 80 && !(await logged()); i++) await sleep(100);
      const logs = worker.logs.join("\n");
      expect(logs).toContain(`RATE_LIMIT_JWKS_URL`);
      expect(logs).toContain("could not be fetched (no answer within 5 s)");
      expect(logs).not.toContain(URL_SECRET);
      expect(`${first.body}${third.body}`).not.toContain(URL_SECRET);
      await send();
      expect(hits.get("hang")).toBe(1);
      // A few seconds later it is asked again.
      await sleep(5200);
      await send();
      expect(hits.get("hang")).toBe(2);
    } finally {
      await worker.dispose();
    }
  });

  it("answers 503 with Retry-After for a rule that fails closed when the JWKS errs, never 401, never the URL", async () => {
    const worker = await startWorker({
      bindings: workerBindings(`${jwksBase}/error/jwks.json`, [rule({ missing: "deny", failure: "closed" })]),
    });
    try {
      const before = hits.get("error") ?? 0;
      for (let i = 0; i < 2; i++) {
        const response = await worker.fetch("/", {
          headers: { Authorization: `Bearer ${token}`, "CF-Connecting-IP": "203.0.113.10" },
        });
        const text = await response.text();
        expect(response.status).toBe(503);
        expect(response.headers.get("content-type")).toBe("application/problem+json");
        expect(response.headers.get("Server-Timing")).toMatch(
          /^ratelimit;dur=[\d.]+;desc="jwks_unavailable"$/,
        );
        const retryAfter = Number(response.headers.get("retry-after"));
        expect(retryAfter).toBeGreaterThanOrEqual(1);
        expect(retryAfter).toBeLessThanOrEqual(5);
        const body = JSON.parse(text) as Record<string, unknown>;
        expect(body.type).toBe("https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
        expect(body["violated-policies"]).toEqual(["per-user"]);
        expect(text).not.toContain(URL_SECRET);
        expect(text).not.toContain("127.0.0.1");
        expect(text).not.toMatch(/\bat .+:\d+:\d+/); // no stack trace
      }
      expect((hits.get("error") ?? 0) - before).toBe(1);
      // Each 503 logs its line, as one Redis could not decide does, with the reason (the worker's output may
      // reach the test a moment after its response).
      const denials = () => worker.logs.filter((line) => line.includes('"event":"ratelimit.denied"'));
      await vi.waitFor(() => expect(denials()).toHaveLength(2), { timeout: 2000 });
      const unavailable = denials();
      expect(unavailable[0]).toMatch(
        /"rule":"per-user","verdict":"unavailable".*"reason":"jwks_unavailable"/,
      );
      expect(worker.logs.join("\n")).toContain("could not be fetched (the answer was not 200 with JSON)");
      expect(worker.logs.join("\n")).not.toContain(URL_SECRET);
    } finally {
      await worker.dispose();
    }
  });

  it("slower than the budget still serves the requests after the one that stopped waiting for it", async () => {
    const worker = await startWorker({
      bindings: workerBindings(`${jwksBase}/slow/jwks.json`, [rule({ missing: "skip" })]),
    });
    try {
      const send = () =>
        worker.fetch("/", {
          headers: { Authorization: `Bearer ${token}`, "CF-Connecting-IP": "203.0.113.12" },
        });
      // The key set is not there in time: the token is as good as absent, and the rule is skipped.
      const first = await send();
      expect(first.status).toBe(200);
      expect(first.headers.get("RateLimit")).toBeNull();
      await sleep(SLOW_MS + 500);
      // The fetch went on after that request: the token is checked now, and the rule counts it.
      const later = await send();
      expect(later.headers.get("RateLimit")).toMatch(/^"per-user";r=1;/);
      expect(hits.get("slow")).toBe(1);
    } finally {
      await worker.dispose();
    }
  });

  it("is reported by health and the dashboard as this isolate last knew it: unknown, then unavailable (degraded), then ok, never fetched by health nor named", async () => {
    const adminToken = `admin-${crypto.randomUUID()}`;
    const worker = await startWorker({
      bindings: {
        ...workerBindings(`${jwksBase}/flaky/jwks.json`, [rule({ failure: "closed" })]),
        RATE_LIMIT_ADMIN_TOKEN: adminToken,
      },
    });
    try {
      const health = async () => {
        const response = await worker.fetch("/__floodgate/health");
        const text = await response.text();
        expect(response.status).toBe(200);
        expect(text).not.toContain(URL_SECRET);
        expect(text).not.toContain(jwksBase);
        return JSON.parse(text) as { status: string; redis: { reachable: boolean }; jwks?: unknown };
      };
      const send = () =>
        worker.fetch("/", {
          headers: { Authorization: `Bearer ${token}`, "CF-Connecting-IP": "203.0.113.13" },
        });

      // Nothing fetched yet in this isolate, and health does not fetch it.
      expect(await health()).toMatchObject({
        status: "ok",
        jwks: { status: "unknown", lastKnownKeys: false },
      });
      expect(hits.get("flaky")).toBeUndefined();

      // The JWKS errs: the fail-closed rule answers 503, and health is degraded while Redis is fine.
      expect((await send()).status).toBe(503);
      expect(await health()).toMatchObject({
        status: "degraded",
        redis: { reachable: true },
        jwks: { status: "unavailable", lastKnownKeys: false },
      });
      expect(hits.get("flaky")).toBe(1);
      // The dashboard's health strip says it too, in its first HTML and in the data its script refreshes from.
      const login = await worker.fetch("/__floodgate/login", {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded", Origin: "http://floodgate.test" },
        body: new URLSearchParams({ token: adminToken }),
        redirect: "manual",
      });
      const cookie = (login.headers.get("Set-Cookie") ?? "").split(";")[0] as string;
      const page = await (await worker.fetch("/__floodgate/", { headers: { Cookie: cookie } })).text();
      expect(page).toContain('<dd data-field="health.jwks">unavailable</dd>');
      const data = await worker.fetch("/__floodgate/dashboard.json", {
        headers: { Authorization: `Bearer ${adminToken}` },
      });
      expect(await data.json()).toMatchObject({ health: { jwks: { status: "unavailable" } } });
      expect(hits.get("flaky")).toBe(1);

      // Back up: the next request after the retry pause fetches it, and health is ok again.
      flakyUp = true;
      await sleep(5200);
      // Past the pause and not asked since, the failure is no longer news: unknown, not degraded for good.
      expect(await health()).toMatchObject({
        status: "ok",
        jwks: { status: "unknown", lastKnownKeys: false },
      });
      expect((await send()).status).toBe(200);
      expect(await health()).toMatchObject({ status: "ok", jwks: { status: "ok", lastKnownKeys: true } });
      expect(hits.get("flaky")).toBe(2);
    } finally {
      await worker.dispose();
    }
  });

  it("bounds the npm middleware's wait by its timeoutMs", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    const app = new Hono();
    app.use(
      "*",
      rateLimit({
        redis: { url: inject("redisRestUrl"), token: inject("redisRestToken") },
        prefix: `jwks-mw-${crypto.randomUUID().slice(0, 8)}`,
        timeoutMs: BUDGET_MS,
        // `app.request` has no connection: the test names its client the way a trusted proxy would.
        clientIpHeader: "CF-Connecting-IP",
        jwt: { jwksUrl: `${jwksBase}/hang/other/jwks.json`, verifier: joseVerifier },
        rules: [{ name: "per-user", key: "jwt:sub", algorithm: "fixed-window", limit: 5, period: "1h" }],
      }),
    );
    app.get("/", (c) => c.text("ok"));
    const started = performance.now();
    const response = await app.request("/", {
      headers: { Authorization: `Bearer ${token}`, "CF-Connecting-IP": "203.0.113.11" },
    });
    expect(response.status).toBe(200);
    expect(performance.now() - started).toBeLessThan(JOSE_DEFAULT_MS / 2);
    // jose gives up on the fetch after its own 5 s; then the one log line.
    for (let i = 0; i < 80 && warn.mock.calls.length === 0; i++) await sleep(100);
    const logged = warn.mock.calls.flat().join("\n");
    warn.mockRestore();
    expect(logged).toContain("jwt.jwksUrl (middleware)) could not be fetched");
    expect(logged).not.toContain(URL_SECRET);
  });
});
