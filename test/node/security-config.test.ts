/**
 * What a configuration may not leave open to a client (docs/security.md): tier and class names that an object
 * lookup would miss, an admin token short enough to guess, JWT tiers from tokens minted for another service.
 */
import { SignJWT } from "jose";
import { describe, expect, it } from "vitest";
import { ConfigError, parseEnv } from "../../src/config";
import type { Env } from "../../src/env";
import { createJwtVerifier } from "../../src/identity/jose";
import { joseVerifier } from "../../src/jwt";
import { rateLimit } from "../../src/middleware";

const BASE = {
  ORIGIN_URL: "https://origin.example.com",
  UPSTASH_REDIS_REST_URL: "https://one.upstash.io",
  UPSTASH_REDIS_REST_TOKEN: "s3cret-token-AAAA",
};
const PER_IP = [{ name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 10, period: "1m" }];

/** The ConfigError `parse` throws, or a failure when it throws none. */
function configError(parse: () => unknown): ConfigError {
  try {
    parse();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return error as ConfigError;
  }
  throw new Error("expected a ConfigError");
}

describe("tier and priority class names", () => {
  // Written as JSON, as RATE_LIMIT_RULES arrives: `__proto__` is then an own key like any other.
  const tiered = (name: string) =>
    `[{"name":"api","key":"header:x-api-key","algorithm":"fixed-window","limit":2,"period":"1m","tier":"jwt:plan","tiers":{"${name}":{"limit":1000}}}]`;
  const shed = (name: string) =>
    `[{"name":"budget","key":"global","algorithm":"shed","limit":10,"priority":"jwt:plan","priorities":{"${name}":1,"low":0.5}}]`;
  const env = (rules: string) =>
    ({ ...BASE, RATE_LIMIT_JWT_SECRET: "jwt-secret", RATE_LIMIT_RULES: rules }) as unknown as Env;

  it("refuses a name an object already has (constructor, __proto__, …), naming the field", () => {
    for (const name of ["constructor", "prototype", "__proto__", "toString", "hasOwnProperty"]) {
      expect(configError(() => parseEnv(env(tiered(name)))).message).toContain(
        `RATE_LIMIT_RULES[0].tiers.${name}: "${name}" cannot name a tier`,
      );
      expect(configError(() => parseEnv(env(shed(name)))).message).toContain(
        `RATE_LIMIT_RULES[0].priorities.${name}: "${name}" cannot name a priority class`,
      );
    }
    // Names that merely contain one are names like any other.
    expect(parseEnv(env(tiered("constructors"))).rules[0]?.tiers).toHaveProperty("constructors");
  });

  it("refuses a `__proto__` tier written as a JavaScript object literal in the middleware's options", () => {
    const rules = [
      {
        name: "api",
        key: "ip" as const,
        algorithm: "fixed-window" as const,
        limit: 2,
        period: "1m" as const,
        tier: "jwt:plan" as const,
        // An object literal's `__proto__` sets the prototype: no own key, and a lookup reads through it.
        tiers: { __proto__: { limit: 1000 } } as unknown as Record<string, { limit: number }>,
      },
    ];
    expect(() =>
      rateLimit({
        redis: { url: "https://one.upstash.io", token: "t0ken" },
        jwt: { secret: "s", verifier: joseVerifier },
        rules,
      }),
    ).toThrow(/rules\[0\]\.tiers\.__proto__: "__proto__" cannot name a tier/);
  });
});

describe("the admin token", () => {
  const withAdmin = (token: string) => () =>
    parseEnv({ ...BASE, RATE_LIMIT_RULES: JSON.stringify(PER_IP), RATE_LIMIT_ADMIN_TOKEN: token } as Env);

  it("is refused shorter than 16 characters, naming the binding and never the token", () => {
    for (const token of ["abc", "hunter2", "fifteen-chars15"]) {
      const error = configError(withAdmin(token));
      expect(error.message).toMatch(/^RATE_LIMIT_ADMIN_TOKEN: \d+ characters, fewer than 16/);
      expect(error.message).not.toContain(token);
    }
    expect(withAdmin("sixteen-chars-16")().adminToken).toBe("sixteen-chars-16");
    // Counted after trimming, as it is sent.
    expect(configError(withAdmin("  short-token  \n")).message).toContain("11 characters");
  });
});

describe("jwt audience and issuer", () => {
  const secret = "audience-test-secret";
  const key = new TextEncoder().encode(secret);
  const token = (claims: { aud?: string; iss?: string }) => {
    let jwt = new SignJWT({ plan: "pro" }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("1h");
    if (claims.aud) jwt = jwt.setAudience(claims.aud);
    if (claims.iss) jwt = jwt.setIssuer(claims.iss);
    return jwt.sign(key);
  };

  it("trusts a token only when it was minted for this audience by this issuer", async () => {
    const verify = createJwtVerifier(
      { secret, audience: "floodgate-api", issuer: "https://auth.example.com" },
      { timeoutMs: 200 },
    );
    if (!verify) throw new Error("expected a verifier");
    const right = await token({ aud: "floodgate-api", iss: "https://auth.example.com" });
    expect((await verify(right))?.plan).toBe("pro");
    for (const claims of [
      {},
      { aud: "another-service", iss: "https://auth.example.com" },
      { aud: "floodgate-api", iss: "https://evil.example.com" },
      { aud: "floodgate-api" },
    ]) {
      expect(await verify(await token(claims)), JSON.stringify(claims)).toBeUndefined();
    }
  });

  it("takes them as bindings and as middleware options, checked", () => {
    const rules = JSON.stringify([{ ...PER_IP[0], key: "jwt:sub" }]);
    const config = parseEnv({
      ...BASE,
      RATE_LIMIT_RULES: rules,
      RATE_LIMIT_JWT_SECRET: secret,
      RATE_LIMIT_JWT_AUDIENCE: "floodgate-api",
      RATE_LIMIT_JWT_ISSUER: "https://auth.example.com",
    } as Env);
    expect(config.jwtAudience).toEqual(["floodgate-api"]);
    expect(config.jwtIssuer).toEqual(["https://auth.example.com"]);
    // A comma-separated list: any one of them.
    expect(
      parseEnv({
        ...BASE,
        RATE_LIMIT_RULES: rules,
        RATE_LIMIT_JWT_SECRET: secret,
        RATE_LIMIT_JWT_AUDIENCE: "a, b",
      } as Env).jwtAudience,
    ).toEqual(["a", "b"]);
    expect(
      configError(() =>
        parseEnv({ ...BASE, RATE_LIMIT_RULES: rules, RATE_LIMIT_JWT_AUDIENCE: 42 } as unknown as Env),
      ).message,
    ).toContain("RATE_LIMIT_JWT_AUDIENCE: expected a string");
    expect(() =>
      rateLimit({
        redis: { url: "https://one.upstash.io", token: "t0ken" },
        jwt: { secret, audience: 42 as unknown as string, verifier: joseVerifier },
        rules: [{ name: "a", key: "jwt:sub", algorithm: "fixed-window", limit: 1, period: "1m" }],
      }),
    ).toThrow(/jwt\.audience: expected a string or an array of strings/);
  });
});
