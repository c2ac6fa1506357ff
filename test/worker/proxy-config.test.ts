import { describe, expect, it } from "vitest";
import { makeEnv, newTag, originCount, send } from "./proxy-harness";

const good = { name: "ok", key: "ip", algorithm: "fixed-window", limit: 5, period: "1m" };

describe("configuration", () => {
  it("answers every request with a 500 naming the binding and field, and never proxies unlimited", async () => {
    const env = makeEnv(
      [good, good, { ...good, name: "bad", period: "1 fortnight" }].map((r, i) => ({
        ...r,
        name: `${r.name}${i}`,
      })),
    );
    const tag = newTag();
    for (let i = 0; i < 2; i++) {
      const sent = await send(env, "/", { ip: "192.0.2.1", headers: { "x-count-tag": tag } });
      expect(sent.status).toBe(500);
      expect(sent.headers.get("Content-Type")).toBe("application/problem+json");
      expect(sent.json().detail).toContain('RATE_LIMIT_RULES[2].period: "1 fortnight" is not a duration');
    }
    expect(await originCount(tag)).toBe(0);
  });

  it("names each kind of mistake precisely", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [makeEnv([{ ...good, algorithm: "leaky" }]), 'RATE_LIMIT_RULES[0].algorithm: "leaky" is not one of'],
      [makeEnv([{ ...good, limt: 3 }]), 'RATE_LIMIT_RULES[0].limt: unknown field "limt"'],
      [makeEnv([good, good]), 'RATE_LIMIT_RULES[1].name: "ok" is already used by RATE_LIMIT_RULES[0]'],
      [
        makeEnv([{ ...good, key: "jwt:sub" }]),
        'RATE_LIMIT_RULES[0].key: "jwt:sub" needs RATE_LIMIT_JWT_SECRET or RATE_LIMIT_JWKS_URL',
      ],
      [
        makeEnv([good], { RATE_LIMIT_MODE: "enforce" }),
        'RATE_LIMIT_MODE: "enforce" is not one of on | off | monitor',
      ],
      [
        makeEnv([good], { RATE_LIMIT_TIMEOUT_MS: "fast" }),
        'RATE_LIMIT_TIMEOUT_MS: "fast" is not a whole number',
      ],
      [makeEnv([good], { ORIGIN_URL: "ftp://x" }), "ORIGIN_URL:"],
      [makeEnv("[{not json"), "RATE_LIMIT_RULES: not valid JSON"],
    ];
    for (const [env, message] of cases) {
      const sent = await send(env, "/", { ip: "192.0.2.2" });
      expect(sent.status).toBe(500);
      expect(sent.json().detail).toContain(message);
    }
  });

  it("never echoes a secret in a configuration error", async () => {
    const env = makeEnv([{ ...good, period: "nope" }], {
      RATE_LIMIT_JWT_SECRET: "sup3r-s3cret-value",
      RATE_LIMIT_ADMIN_TOKEN: "adm1n-t0ken-0123456",
    });
    const sent = await send(env, "/", { ip: "192.0.2.3" });
    expect(sent.status).toBe(500);
    expect(sent.text).not.toContain("sup3r-s3cret-value");
    expect(sent.text).not.toContain("adm1n-t0ken");
    expect(sent.text).not.toContain(String(env.UPSTASH_REDIS_REST_TOKEN));
  });

  it("accepts rules and numbers in their TOML types as well as strings", async () => {
    const env = makeEnv([], {
      RATE_LIMIT_RULES: [{ name: "typed", key: "ip", algorithm: "gcra", limit: 2, period: 60 }],
      RATE_LIMIT_TIMEOUT_MS: 500,
      ORIGIN_TIMEOUT_MS: 10_000,
    });
    const sent = await send(env, "/", { ip: "192.0.2.4" });
    expect(sent.status).toBe(200);
    expect(sent.headers.get("RateLimit-Policy")).toBe('"typed";q=2;w=60');
  });
});

describe("rule matching", () => {
  const env = makeEnv([
    {
      name: "writes",
      match: { methods: ["POST"], path: "/api/*" },
      key: "ip",
      algorithm: "fixed-window",
      limit: 1,
      period: "1h",
    },
    {
      name: "user",
      match: { path: "/users/:id" },
      key: "ip",
      algorithm: "fixed-window",
      limit: 1,
      period: "1h",
    },
    {
      name: "host",
      match: { host: "api.example.com" },
      key: "ip",
      algorithm: "fixed-window",
      limit: 1,
      period: "1h",
    },
  ]);
  const policies = async (url: string, method = "GET") =>
    (await send(env, url, { method, ip: "192.0.2.5" })).headers.get("RateLimit-Policy");

  it("matches methods, path patterns (* spans segments, :name is one) and host", async () => {
    expect(await policies("http://x.test/api/a/b", "POST")).toBe('"writes";q=1;w=3600');
    expect(await policies("http://x.test/api/a/b", "GET")).toBeNull();
    expect(await policies("http://x.test/users/42")).toBe('"user";q=1;w=3600');
    expect(await policies("http://x.test/users/42/posts")).toBeNull();
    expect(await policies("http://api.example.com/other")).toBe('"host";q=1;w=3600');
    expect(await policies("http://API.example.com/users/7")).toBe('"user";q=1;w=3600, "host";q=1;w=3600');
  });

  /** A rule on every path with `wide` per hour, and one of 2 per hour on `/search`, both by IP. */
  const wideAndNarrow = (wide: number) =>
    makeEnv([
      { name: "wide", key: "ip", algorithm: "fixed-window", limit: wide, period: "1h" },
      {
        name: "narrow",
        match: { path: "/search" },
        key: "ip",
        algorithm: "fixed-window",
        limit: 2,
        period: "1h",
      },
    ]);

  it("the strictest matching rule decides and is reported", async () => {
    // An hour: no epoch-aligned window turns between the requests.
    const both = wideAndNarrow(10);
    const statuses: number[] = [];
    let last = await send(both, "/search", { ip: "192.0.2.6" });
    expect(last.headers.get("X-RateLimit-Limit")).toBe("2");
    statuses.push(last.status);
    for (let i = 0; i < 2; i++) {
      last = await send(both, "/search", { ip: "192.0.2.6" });
      statuses.push(last.status);
    }
    expect(statuses).toEqual([200, 200, 429]);
    expect(last.json().policy).toBe("narrow");
    expect((await send(both, "/elsewhere", { ip: "192.0.2.6" })).status).toBe(200);
  });

  it("of two rules that deny until the same instant, the one with the lower limit is reported", async () => {
    // Both fixed windows of an hour end together: equal Retry-After, no quota left in either.
    const both = wideAndNarrow(3);
    const ip = "192.0.2.7";
    expect((await send(both, "/search", { ip })).status).toBe(200);
    expect((await send(both, "/search", { ip })).status).toBe(200);
    expect((await send(both, "/elsewhere", { ip })).status).toBe(200);
    const denied = await send(both, "/search", { ip });
    expect(denied.status).toBe(429);
    expect(denied.json()).toMatchObject({ policy: "narrow", "violated-policies": ["wide", "narrow"] });
    expect(denied.headers.get("X-RateLimit-Limit")).toBe("2");
  });
});
