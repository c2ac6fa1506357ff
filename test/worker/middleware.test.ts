import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { describe, expect, it, vi } from "vitest";
import { hashIdentity, overrideKey } from "../../src/engine/keys";
import { joseVerifier } from "../../src/jwt";
import {
  ConfigError,
  type DecisionEvent,
  type LiveModes,
  QuotaExceededError,
  rateLimit,
} from "../../src/index";
import { baseEnv, redis as restClient } from "./proxy-harness";

const redis = { url: baseEnv.UPSTASH_REDIS_REST_URL, token: baseEnv.UPSTASH_REDIS_REST_TOKEN };
const prefix = () => `mw-${crypto.randomUUID().slice(0, 12)}`;

async function call(app: Hono, path: string, headers: Record<string, string> = {}) {
  const ctx = createExecutionContext();
  const response = await app.fetch(new Request(`http://app.test${path}`, { headers }), {}, ctx);
  const text = await response.text();
  await waitOnExecutionContext(ctx);
  return { status: response.status, headers: response.headers, text };
}

describe("rateLimit() in an existing Hono app", () => {
  it("limits by a key function and a cost function, and leaves other routes alone", async () => {
    const app = new Hono();
    app.use(
      "/api/*",
      rateLimit({
        redis,
        prefix: prefix(),
        rules: [
          {
            name: "per-user",
            key: (c) => c.req.header("x-user"),
            cost: (c) => Number(c.req.query("n") ?? 1),
            algorithm: "fixed-window",
            limit: 5,
            period: "1h", // no epoch-aligned window turns between the requests
          },
        ],
      }),
    );
    app.get("/api/items", (c) => c.json({ ok: true }));
    app.get("/health", (c) => c.text("up"));

    const first = await call(app, "/api/items?n=3", { "x-user": "ann" });
    expect(first.status).toBe(200);
    expect(first.headers.get("RateLimit")).toMatch(/^"per-user";r=2;t=\d+$/);
    expect((await call(app, "/api/items?n=3", { "x-user": "ann" })).status).toBe(429);
    expect((await call(app, "/api/items?n=2", { "x-user": "ann" })).status).toBe(200);
    expect((await call(app, "/api/items", { "x-user": "bob" })).status).toBe(200);
    const health = await call(app, "/health");
    expect(health.status).toBe(200);
    expect(health.headers.get("RateLimit")).toBeNull();
  });

  it("answers a client Redis just denied from its deny cache", async () => {
    const app = new Hono();
    app.use(
      rateLimit({
        redis,
        prefix: prefix(),
        rules: [{ name: "once", key: "global", algorithm: "fixed-window", limit: 1, period: "1h" }],
      }),
    );
    app.get("/", (c) => c.text("ok"));
    expect((await call(app, "/")).status).toBe(200);
    const byRedis = await call(app, "/");
    expect(byRedis.status).toBe(429);
    expect(byRedis.headers.get("Server-Timing")).not.toContain("deny_cache");
    const cached = await call(app, "/");
    expect(cached.status).toBe(429);
    expect(cached.headers.get("Server-Timing")).toContain('desc="deny_cache"');
    expect(cached.headers.get("RateLimit")).toMatch(/^"once";r=0;t=\d+$/);
  });

  it("reads no override unless asked to: one written to Redis applies only with overrides: true", async () => {
    const keys = prefix();
    await restClient.hset(overrideKey(keys, "o", await hashIdentity("global")), { limit: 1 });
    const appWith = (overrides: boolean) => {
      const app = new Hono();
      app.use(
        rateLimit({
          redis,
          prefix: keys,
          overrides,
          rules: [{ name: "o", key: "global", algorithm: "fixed-window", limit: 5, period: "1h" }],
        }),
      );
      app.get("/", (c) => c.text("ok"));
      return app;
    };
    const reading = await call(appWith(true), "/");
    expect(reading.status).toBe(200);
    expect(reading.headers.get("RateLimit-Policy")).toBe('"o";q=1;w=3600');
    const plain = await call(appWith(false), "/");
    expect(plain.status).toBe(200);
    expect(plain.headers.get("RateLimit-Policy")).toBe('"o";q=5;w=3600');
    expect(plain.headers.get("RateLimit")).toMatch(/^"o";r=3;t=\d+$/);
  });

  it("answers 400 when a cost function returns nonsense", async () => {
    const app = new Hono();
    app.use(
      rateLimit({
        redis,
        prefix: prefix(),
        rules: [{ name: "c", key: "global", cost: () => 0.5, algorithm: "gcra", limit: 5, period: "1s" }],
      }),
    );
    app.get("/", (c) => c.text("ok"));
    expect((await call(app, "/")).status).toBe(400);
  });

  it("answers 401 naming the rule when its key function returns nothing and missing is deny", async () => {
    const app = new Hono();
    app.use(
      rateLimit({
        redis,
        prefix: prefix(),
        rules: [
          {
            name: "per-user",
            key: (c) => c.req.header("x-user-id"),
            missing: "deny",
            algorithm: "gcra",
            limit: 5,
            period: "1s",
          },
        ],
      }),
    );
    app.get("/", (c) => c.text("ok"));
    expect((await call(app, "/", { "x-user-id": "u1" })).status).toBe(200);
    const anonymous = await call(app, "/");
    expect(anonymous.status).toBe(401);
    expect(JSON.parse(anonymous.text)).toEqual({
      type: "about:blank",
      title: "Unauthorized",
      status: 401,
      detail: 'Rule "per-user" needs a key, and its key function returned no value for this request.',
      key: "function",
    });
  });

  it("reports every decision to onDecision", async () => {
    const seen = vi.fn<(event: DecisionEvent) => void>();
    const app = new Hono();
    app.use(
      rateLimit({
        redis,
        prefix: prefix(),
        onDecision: seen,
        rules: [{ name: "g", key: "global", algorithm: "sliding-log", limit: 1, period: "1m" }],
      }),
    );
    app.get("/", (c) => c.text("ok"));
    await call(app, "/");
    await call(app, "/");
    expect(seen).toHaveBeenCalledTimes(2);
    expect(seen.mock.calls.map(([event]) => event.decision.allowed)).toEqual([true, false]);
    expect(seen.mock.calls[0]?.[0].requestId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("follows live modes: live per-rule > the rule's mode > live global > the configured mode", async () => {
    let live: LiveModes = { rules: {} };
    const app = new Hono();
    app.use(
      rateLimit({
        redis,
        prefix: prefix(),
        mode: "on",
        liveModes: () => live,
        rules: [
          { name: "plain", key: "global", algorithm: "fixed-window", limit: 1, period: "1h" },
          { name: "pinned", key: "global", algorithm: "fixed-window", limit: 1, period: "1h", mode: "on" },
        ],
      }),
    );
    app.get("/", (c) => c.text("ok"));
    const policies = async () => (await call(app, "/")).headers.get("RateLimit-Policy");

    live = { global: "off", rules: {} };
    expect(await policies()).toBe('"pinned";q=1;w=3600'); // the rule's own mode beats the live global switch
    live = { global: "off", rules: { pinned: "off" } };
    expect(await policies()).toBeNull(); // a live per-rule switch beats everything
    expect((await call(app, "/")).status).toBe(200);
    live = { global: "monitor", rules: { pinned: "monitor" } };
    const watched = await call(app, "/");
    expect(watched.status).toBe(200); // both are over their limit of 1, but only watched
    expect(watched.headers.get("RateLimit")).toMatch(/"plain";r=0.*"pinned";r=0/);
    live = { rules: {} };
    expect((await call(app, "/")).status).toBe(429);
  });

  it("validates its options once, naming the wrong field", () => {
    expect(() =>
      rateLimit({
        redis,
        rules: [{ name: "x", key: "ip", algorithm: "fixed-window", limit: 5, period: "5 parsecs" as never }],
      }),
    ).toThrowError(new ConfigError('rules[0].period: "5 parsecs" is not a duration'));
    expect(() =>
      rateLimit({ rules: [{ name: "x", key: "ip", algorithm: "gcra", limit: 1, period: "1s" }] }),
    ).toThrowError(/redis/);
    expect(() =>
      rateLimit({ redis, rules: [{ name: "x", key: "jwt:sub", algorithm: "gcra", limit: 1, period: "1s" }] }),
    ).toThrowError(/jwt:sub.*needs/);
    const rules = [{ name: "x", key: "ip", algorithm: "gcra", limit: 1, period: "1s" }] as const;
    expect(() => rateLimit({ redis, rules: [...rules], leases: "sometimes" as never })).toThrowError(
      new ConfigError('leases: "sometimes" is not one of on | off'),
    );
    expect(() => rateLimit({ redis, rules: [...rules], leaseMs: 0 })).toThrowError(/^leaseMs: 0 is not/);
    // Untyped code: a wrong case must not quietly become a limiter that never blocks.
    expect(() => rateLimit({ redis, rules: [...rules], mode: "ON" as never })).toThrowError(
      new ConfigError('mode: "ON" is not one of on | off | monitor'),
    );
    expect(() =>
      rateLimit({ redis, rules: [...rules], failure: "shut" as never, timeoutMs: -1, prefix: "a b" }),
    ).toThrowError(/^failure: "shut" is not one of open \| closed; timeoutMs: .*; prefix: "a b" is not/);
    expect(() => rateLimit({ redis, rules: [...rules], clientIpHeader: "X Real IP" })).toThrowError(
      /^clientIpHeader: "X Real IP" is not a header name/,
    );
    expect(() => rateLimit({ redis, rules: [...rules], cluster: "yes" as never })).toThrowError(/^cluster: /);
    // A Redis URL (not the REST one) pasted by mistake: named, and its password never shown.
    const pasted = () =>
      rateLimit({
        redis: { url: "redis://default:pa55word@x.upstash.io:6379", token: "t" },
        rules: [...rules],
      });
    expect(pasted).toThrowError(/^redis\.url: "redis:\/\/x\.upstash\.io:6379" is not an http\(s\) URL/);
    expect(pasted).not.toThrowError(/pa55word/);
    // An unset variable arrives as "" or undefined: the message names the field that is empty.
    expect(() => rateLimit({ redis: { url: redis.url, token: "" }, rules: [...rules] })).toThrowError(
      /^redis\.token: required/,
    );
    expect(() =>
      rateLimit({ redis: { url: undefined as never, token: "" }, rules: [...rules] }),
    ).toThrowError(/^redis\.url: required .*; redis\.token: required/);
  });

  it("checks jwt.jwksUrl as the Worker checks RATE_LIMIT_JWKS_URL, naming the field and never its query", () => {
    const rules = [{ name: "x", key: "jwt:sub", algorithm: "gcra", limit: 1, period: "1s" }] as const;
    const withJwks = (jwksUrl: unknown) => () =>
      rateLimit({ redis, rules: [...rules], jwt: { jwksUrl: jwksUrl as string, verifier: joseVerifier } });
    expect(withJwks("ftp://keys.example.com/jwks.json")).toThrowError(
      new ConfigError(
        'jwt.jwksUrl: "ftp://keys.example.com" is not an http(s) URL without query or fragment',
      ),
    );
    expect(withJwks("keys.example.com/jwks.json")).toThrowError(
      new ConfigError("jwt.jwksUrl: the value is not an http(s) URL without query or fragment"),
    );
    // A signed address pasted whole: refused as the binding is, and its signature never shown.
    const signed = withJwks("https://keys.example.com/jwks.json?sig=s3cret-sig");
    expect(signed).toThrowError(/^jwt\.jwksUrl: "https:\/\/keys\.example\.com" is not an http\(s\) URL/);
    expect(signed).not.toThrowError(/s3cret-sig/);
    expect(withJwks(42)).toThrowError(new ConfigError("jwt.jwksUrl: expected a URL or a string"));
    // What the Worker takes, the middleware takes: a string or a URL; "" (an unset variable) is no JWKS.
    expect(withJwks("https://keys.example.com/jwks.json")).not.toThrow();
    expect(withJwks(new URL("https://keys.example.com/jwks.json"))).not.toThrow();
    expect(withJwks("")).toThrowError(/^rules\[0\]\.key: "jwt:sub" needs jwt\.secret or jwt\.jwksUrl/);
  });

  it("names every wrong option at once: the rules, the settings and the Redis credentials", () => {
    const rules = [
      { name: "x", key: "ip", algorithm: "fixed-window", limit: 1, period: "1s", delay: "1s" },
      { name: "x", key: "ip", algorithm: "gcra", limit: 1, period: "1s" },
    ] as const;
    let thrown: unknown;
    try {
      rateLimit({ redis: { url: "x", token: "" }, rules: [...rules], mode: "ON" } as never);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).problems).toEqual([
      "rules[0].delay: only token-bucket and gcra rules can delay a request (this one is fixed-window)",
      'rules[1].name: "x" is already used by rules[0]',
      'mode: "ON" is not one of on | off | monitor',
      "redis.token: required (the Upstash REST token, UPSTASH_REDIS_REST_TOKEN)",
    ]);
    // Untyped code may pass anything as a rule: named, never a TypeError.
    expect(() => rateLimit({ redis, rules: [null, 5] } as never)).toThrowError(
      new ConfigError([
        "rules[0]: expected a table of fields, not null",
        "rules[1]: expected a table of fields, not 5",
      ]),
    );
  });

  it("rejects an option it does not know, as it does an unknown rule field", async () => {
    const rules = [{ name: "x", key: "ip", algorithm: "gcra", limit: 1, period: "1s" }] as const;
    // The value form: at once, from code the compiler did not see (plain JavaScript, a cast).
    expect(() => rateLimit({ redis, rules: [...rules], timeout: 50 } as never)).toThrowError(
      new ConfigError("timeout: unknown option (did you mean timeoutMs?)"),
    );
    expect(() =>
      rateLimit({ redis, rules: [...rules], clientIPHeader: "x-real-ip", mode: "ON" } as never),
    ).toThrowError(
      new ConfigError([
        "clientIPHeader: unknown option (did you mean clientIpHeader?)",
        'mode: "ON" is not one of on | off | monitor',
      ]),
    );
    expect(() => rateLimit({ redis, rules: [{ ...rules[0], burts: 5 }] } as never)).toThrowError(
      new ConfigError('rules[0].burts: unknown field "burts"'),
    );
    // The function form (which the compiler does not check for extra fields): on the first request.
    const app = new Hono();
    app.use(rateLimit(() => ({ redis, rules: [...rules], retries: 3 })));
    app.onError((error, c) => c.text(error.message, 500));
    app.get("/", (c) => c.text("ok"));
    const answer = await call(app, "/");
    expect(answer.status).toBe(500);
    expect(answer.text).toBe("retries: unknown option");
  });

  it("decides a hot identity from a lease, unless `leases` is off", async () => {
    const timings = async (leases: "on" | "off") => {
      const app = new Hono();
      const rule = {
        name: "hot",
        key: "global",
        algorithm: "fixed-window",
        limit: 1000,
        period: "1h",
      } as const;
      app.use(rateLimit({ redis, prefix: prefix(), leases, rules: [rule] }));
      app.get("/", (c) => c.text("ok"));
      const out: string[] = [];
      for (let i = 0; i < 10; i++) out.push((await call(app, "/")).headers.get("Server-Timing") ?? "");
      return out;
    };
    expect((await timings("on")).some((t) => t.includes('desc="lease"'))).toBe(true);
    expect((await timings("off")).some((t) => t.includes("lease"))).toBe(false);
  });
});

describe("rateLimit() follows Hono's conventions", () => {
  it("takes options as a function of the context, built once, and shows the decision on c.var", async () => {
    const app = new Hono<{ Bindings: { URL: string; TOKEN: string } }>();
    const built = vi.fn();
    const keyPrefix = prefix();
    app.use(
      "/api/*",
      rateLimit((c) => {
        built();
        return {
          redis: { url: c.env.URL, token: c.env.TOKEN },
          prefix: keyPrefix,
          rules: [
            { name: "per-ip", key: "header:x-client", algorithm: "fixed-window", limit: 2, period: "1h" },
          ],
        };
      }),
    );
    app.get("/api/me", (c) => c.json(c.get("rateLimit") ?? null));
    const env = { URL: redis.url, TOKEN: redis.token };
    const send = async () => {
      const ctx = createExecutionContext();
      const res = await app.fetch(
        new Request("http://app.test/api/me", { headers: { "x-client": "c1" } }),
        env,
        ctx,
      );
      const body = await res.text();
      await waitOnExecutionContext(ctx);
      return { status: res.status, headers: res.headers, body };
    };

    const first = await send();
    expect(first.status).toBe(200);
    expect(JSON.parse(first.body)).toMatchObject({
      allowed: true,
      policy: "per-ip",
      limit: 2,
      remaining: 1,
      source: "redis",
      rules: [{ call: { rule: "per-ip" }, outcome: "allowed", remaining: 1 }],
    });
    expect(JSON.parse((await send()).body)).toMatchObject({ remaining: 0 });
    const denied = await send();
    expect(denied.status).toBe(429);
    expect(denied.headers.get("Content-Type")).toBe("application/problem+json");
    expect(Number(denied.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
    expect(built).toHaveBeenCalledTimes(1);
  });

  it("throws its 429 as an HTTPException that the app's onError can restyle", async () => {
    const app = new Hono();
    app.use(
      rateLimit({
        redis,
        prefix: prefix(),
        rules: [{ name: "one", key: "global", algorithm: "fixed-window", limit: 1, period: "1h" }],
      }),
    );
    app.get("/", (c) => c.text("ok"));
    app.onError((err, c) => {
      if (err instanceof HTTPException && err.status === 429) {
        const allowed = c.get("rateLimit")?.allowed; // the decision is on c.var before the throw
        return c.text(
          `slow down (${err.getResponse().headers.get("Retry-After")} s, allowed: ${allowed})`,
          429,
        );
      }
      return c.text("other", 500);
    });
    expect((await call(app, "/")).status).toBe(200);
    const denied = await call(app, "/");
    expect(denied.status).toBe(429);
    expect(denied.text).toMatch(/^slow down \(\d+ s, allowed: false\)$/);
  });

  it("throws a cost above what the rule can ever grant as a 429 that says it can never pass", async () => {
    const app = new Hono();
    app.use(
      rateLimit({
        redis,
        prefix: prefix(),
        rules: [
          {
            name: "rows",
            key: "global",
            algorithm: "fixed-window",
            limit: 5,
            period: "1h",
            cost: (c) => Number(c.req.query("rows") ?? 1),
          },
        ],
      }),
    );
    let thrown: unknown;
    app.onError((err, c) => {
      thrown = err;
      return err instanceof HTTPException ? err.getResponse() : c.text("unexpected", 500);
    });
    app.get("/", (c) => c.text("ok"));
    const denied = await call(app, "/?rows=6");
    expect(denied.status).toBe(429);
    expect(denied.headers.get("Retry-After")).toBe("3600");
    const problem = JSON.parse(denied.text);
    expect(problem["cost-exceeds-capacity"]).toEqual(["rows"]);
    expect(problem.detail).toContain('it costs 6 units and rule "rows" grants at most 5 at once');
    expect(problem.detail).toContain("No wait lets it in");
    expect(thrown).toBeInstanceOf(QuotaExceededError);
    expect((thrown as QuotaExceededError).detail).toBe(problem.detail);
    // Five rows fit: the rule was not charged for the refused six.
    expect((await call(app, "/?rows=5")).status).toBe(200);
  });

  it("in monitor mode passes a request that would be denied: allowed stays true, the rule's outcome says so", async () => {
    const app = new Hono();
    app.use(
      rateLimit({
        redis,
        prefix: prefix(),
        mode: "monitor",
        rules: [{ name: "one", key: "global", algorithm: "fixed-window", limit: 1, period: "1h" }],
      }),
    );
    app.get("/", (c) => {
      const info = c.get("rateLimit");
      return c.json({
        allowed: info?.allowed,
        mode: info?.rules[0]?.call.mode,
        outcome: info?.rules[0]?.outcome,
      });
    });
    expect(JSON.parse((await call(app, "/")).text)).toEqual({
      allowed: true,
      mode: "monitor",
      outcome: "allowed",
    });
    const watched = await call(app, "/");
    expect(watched.status).toBe(200);
    expect(JSON.parse(watched.text)).toEqual({ allowed: true, mode: "monitor", outcome: "denied" });
  });
});
