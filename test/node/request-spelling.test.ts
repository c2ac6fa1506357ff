// Spellings a client may choose so that the limiter and the origin read a request differently: each is read
// here as the origin would (or the origin is sent what was counted), so none of them is a way past a rule.
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { parseRules } from "../../src/config/rules";
import { clientIpFrom, identityOf, RequestFacts } from "../../src/identity";
import { compileRules } from "../../src/rules/match";
import { canonicalPath } from "../../src/rules/path";
import { startEchoOrigin } from "../support/echo-origin.mjs";
import { startWorker } from "../support/miniflare-worker.mjs";

const RULES = [
  {
    name: "get-only",
    match: { methods: ["GET"], path: "/search/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 1,
    period: "1m",
  },
  {
    name: "host",
    match: { host: "api.example.com" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 1,
    period: "1m",
  },
  {
    name: "any-host",
    match: { host: "*.example.org" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 1,
    period: "1m",
  },
  {
    name: "query",
    match: { path: "/q/*" },
    key: "query:api_key",
    missing: "deny",
    algorithm: "fixed-window",
    limit: 1,
    period: "1m",
  },
  {
    name: "header",
    match: { path: "/h/*" },
    key: "header:x-api-key",
    algorithm: "fixed-window",
    limit: 3,
    period: "1h",
  },
];

describe("a rule matches the request the origin serves", () => {
  const compiled = compileRules(parseRules(RULES, { label: "RATE_LIMIT_RULES", jwtVerifiable: false }));
  const matched = (method: string, address: string) => {
    const url = new URL(address);
    return compiled
      .filter((r) => r.matches(method, { url, path: canonicalPath(url.pathname), methodOverrides: [] }))
      .map((r) => r.rule.name);
  };

  it("a GET rule covers HEAD, which origins answer with the GET handler", () => {
    expect(matched("HEAD", "https://x.test/search/a")).toContain("get-only");
    expect(matched("POST", "https://x.test/search/a")).not.toContain("get-only");
  });

  it("a path parameter is no way past a path rule (Tomcat, Spring, Jetty route /api;a=1/x to /api/x)", () => {
    expect(matched("GET", "https://x.test/q;a=1/x")).toContain("query");
    expect(matched("GET", "https://x.test/q%3bx/x")).toContain("query");
    expect(matched("GET", "https://x.test/qq;a=1/x")).not.toContain("query");
  });

  it("a host with a trailing dot is the same host, exact or by wildcard", () => {
    expect(matched("GET", "https://api.example.com./x")).toContain("host");
    expect(matched("GET", "https://a.example.org./x")).toContain("any-host");
    expect(matched("GET", "https://api.example.com.evil.test/x")).not.toContain("host");
  });
});

describe("an identity is the one the origin reads", () => {
  const rules = parseRules(RULES, { label: "RATE_LIMIT_RULES", jwtVerifiable: false });
  const query = rules.find((r) => r.name === "query");
  const identity = (url: string) =>
    identityOf(
      query as (typeof rules)[number],
      new RequestFacts(new Request(url), { clientIpHeader: "CF-Connecting-IP" }),
    );

  it("a query key given twice names no one: the rule's `missing` applies (origins read the first or the last)", async () => {
    expect(await identity("https://x.test/q/?api_key=REAL")).not.toEqual({ kind: "deny" });
    expect(await identity("https://x.test/q/?api_key=junk&api_key=REAL")).toEqual({ kind: "deny" }); // 401
  });

  it("X-Forwarded-For, when trusted, is read from its right end: the address the trusted proxy saw", () => {
    const headers = new Headers({ "X-Forwarded-For": "10.0.0.1, 203.0.113.7" });
    expect(clientIpFrom(headers, "X-Forwarded-For")).toBe("203.0.113.7");
  });
});

describe("through the Worker", () => {
  let redis: Awaited<ReturnType<typeof startRedis>>;
  let rest: Awaited<ReturnType<typeof startRestServer>>;
  let origin: Awaited<ReturnType<typeof startEchoOrigin>>;
  let worker: Awaited<ReturnType<typeof startWorker>>;
  beforeAll(async () => {
    redis = await startRedis();
    rest = await startRestServer({ redisUrl: redis.url });
    origin = await startEchoOrigin();
    worker = await startWorker({
      port: await freePort(),
      bindings: {
        ORIGIN_URL: origin.url,
        UPSTASH_REDIS_REST_URL: rest.url,
        UPSTASH_REDIS_REST_TOKEN: rest.token,
        RATE_LIMIT_RULES: JSON.stringify(RULES),
        RATE_LIMIT_PREFIX: `spelling${Date.now()}`,
        // A roomy budget: a decision that timed out on a loaded machine would be answered by the fail-open
        // fallback, uncounted in Redis, and the limit below would let one request more through.
        RATE_LIMIT_TIMEOUT_MS: "5000",
        RATE_LIMIT_ADMIN_TOKEN: "spelling-test-admin-token-0123456789abcdef",
      },
    });
  }, 60_000);
  afterAll(async () => {
    await worker?.dispose();
    await origin?.close();
    await rest?.close();
    await redis?.close();
  });

  /** One raw HTTP request (Node sends a header given as an array as several lines). */
  function raw(path: string, headers: Record<string, string | string[]>, method = "GET", body?: string) {
    const { hostname, port } = new URL(worker.url);
    return new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest({ host: hostname, port, path, method, headers }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk) => {
          text += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
      });
      req.on("error", reject);
      req.end(body);
    });
  }

  it("sends the origin a key header given twice as the one value it counted, never its first line alone", async () => {
    const ip = { "CF-Connecting-IP": "198.51.100.20" };
    for (let i = 0; i < 3; i++) expect((await raw(`/h/${i}`, { ...ip, "x-api-key": "K9" })).status).toBe(200);
    expect((await raw("/h/3", { ...ip, "x-api-key": "K9" })).status).toBe(429);
    const twice = await raw("/h/4", { ...ip, "x-api-key": ["K9", "junk"] });
    expect(twice.status).toBe(200); // another identity: "K9, junk", counted as that
    const lines = JSON.parse(twice.body).rawHeaders as string[];
    const sent = lines.filter((_, i) => i % 2 === 1 && lines[i - 1]?.toLowerCase() === "x-api-key");
    expect(sent).toEqual(["K9, junk"]); // an origin reading the first line gets no K9 to serve
  });

  it("refuses a sign-in body larger than any token form, before reading it", async () => {
    const huge = `token=${"x".repeat(100_000)}`;
    const answer = await raw(
      "/__floodgate/login",
      { "Content-Type": "application/x-www-form-urlencoded" },
      "POST",
      huge,
    );
    expect(answer.status).toBe(413);
    expect(answer.body).not.toContain("xxxx");
  });
});
