import { importJWK, SignJWT } from "jose";
import { describe, expect, it, vi } from "vitest";
import { baseEnv, makeEnv, send } from "./proxy-harness";

const rule = (key: unknown, extra: Record<string, unknown> = {}) => ({
  name: "r",
  key,
  algorithm: "fixed-window",
  limit: 1,
  period: "1h",
  ...extra,
});

/**
 * Sends `a`, then `b`, under a limit of 1: true if `b` was denied (both shared a bucket), false if it was
 * proxied (a bucket of its own). Any other answer (a 400, a 500) fails the test instead of counting as "not
 * shared".
 */
async function shareBucket(
  env: Record<string, unknown>,
  a: RequestInit & { ip?: string; path?: string },
  b: RequestInit & { ip?: string; path?: string },
) {
  expect((await send(env, a.path ?? "/", a)).status).toBe(200);
  const second = (await send(env, b.path ?? "/", b)).status;
  expect([200, 429], `the second request's status`).toContain(second);
  return second === 429;
}

const SECRET = "test-jwt-secret-that-is-long-enough-0123456789";
const jwtFor = (claims: Record<string, unknown>, { expiresIn = "1h", secret = SECRET } = {}) =>
  new SignJWT(claims)
    .setProtectedHeader({ alg: "HS256" })
    .setIssuedAt()
    .setExpirationTime(expiresIn)
    .sign(new TextEncoder().encode(secret));
const bearer = (token: string) => ({ Authorization: `Bearer ${token}` });

describe("who a request is", () => {
  it("ip: different spellings of one IPv6 address are one client; other addresses are not", async () => {
    const env = makeEnv([rule("ip")]);
    expect(await shareBucket(env, { ip: "2001:DB8:0:0:0:0:0:1" }, { ip: "2001:db8::1" })).toBe(true);
    expect((await send(env, "/", { ip: "2001:db8::2" })).status).toBe(200);
  });

  it("ip/64: addresses in one /64 share a bucket, another /64 does not, IPv4 stays whole", async () => {
    const env = makeEnv([rule("ip/64")]);
    expect(
      await shareBucket(env, { ip: "2001:db8:1:2::1" }, { ip: "2001:db8:1:2:ffff:ffff:ffff:ffff" }),
    ).toBe(true);
    expect((await send(env, "/", { ip: "2001:db8:1:3::1" })).status).toBe(200);
    expect(await shareBucket(env, { ip: "192.0.2.1" }, { ip: "192.0.2.1" })).toBe(true);
    expect((await send(env, "/", { ip: "192.0.2.2" })).status).toBe(200);
  });

  it("without the trusted header every client is the one shared `unknown` client, with one warning", async () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    try {
      const env = makeEnv([rule("ip", { limit: 2 })]);
      const statuses: number[] = [];
      for (const xff of ["192.0.2.10", "192.0.2.11", "192.0.2.12"]) {
        statuses.push((await send(env, "/", { headers: { "X-Forwarded-For": xff } })).status);
      }
      expect(statuses).toEqual([200, 200, 429]);
      const warnings = warn.mock.calls.filter(([line]) => String(line).includes("CF-Connecting-IP"));
      expect(warnings).toHaveLength(1);
    } finally {
      warn.mockRestore();
    }
  });

  it("trusts only the configured client IP header", async () => {
    const env = makeEnv([rule("ip")], { RATE_LIMIT_CLIENT_IP_HEADER: "X-Client-IP" });
    // CF-Connecting-IP is now just a header a client can forge; X-Client-IP decides.
    expect(
      await shareBucket(
        env,
        { ip: "192.0.2.20", headers: { "X-Client-IP": "192.0.2.30" } },
        { ip: "192.0.2.21", headers: { "X-Client-IP": "192.0.2.30" } },
      ),
    ).toBe(true);
    expect((await send(env, "/", { headers: { "X-Client-IP": "192.0.2.31" } })).status).toBe(200);
  });

  it("header: and query: keys, and a composite of both", async () => {
    const env = makeEnv([rule("header:X-Api-Key", { name: "h" })]);
    expect(
      await shareBucket(
        env,
        { ip: "192.0.2.40", headers: { "x-api-key": "k1" } },
        { ip: "192.0.2.41", headers: { "x-api-key": "k1" } },
      ),
    ).toBe(true);
    expect((await send(env, "/", { headers: { "x-api-key": "k2" } })).status).toBe(200);

    const query = makeEnv([rule("query:tenant", { name: "q" })]);
    expect(await shareBucket(query, { path: "/?tenant=a" }, { path: "/other?tenant=a&x=1" })).toBe(true);
    expect((await send(query, "/?tenant=b")).status).toBe(200);

    const composite = makeEnv([rule(["header:x-api-key", "query:tenant"], { name: "c" })]);
    expect(
      await shareBucket(
        composite,
        { path: "/?tenant=a", headers: { "x-api-key": "k" } },
        { path: "/?tenant=a", headers: { "x-api-key": "k" } },
      ),
    ).toBe(true);
    expect((await send(composite, "/?tenant=b", { headers: { "x-api-key": "k" } })).status).toBe(200);
    // The separator cannot be smuggled: "k|x" + "y" is not "k" + "x|y".
    expect(
      await shareBucket(
        composite,
        { path: "/?tenant=y", headers: { "x-api-key": "k|x" } },
        { path: "/?tenant=x%7Cy", headers: { "x-api-key": "k" } },
      ),
    ).toBe(false);
  });

  it("missing key: ip (default) falls back to the client IP, skip ignores the rule, deny answers 401 naming the key", async () => {
    const fallback = makeEnv([rule("header:x-api-key")]);
    expect(await shareBucket(fallback, { ip: "192.0.2.50" }, { ip: "192.0.2.50" })).toBe(true);
    expect((await send(fallback, "/", { ip: "192.0.2.51" })).status).toBe(200);

    const skip = makeEnv([rule("header:x-api-key", { missing: "skip" })]);
    for (let i = 0; i < 3; i++) {
      const sent = await send(skip, "/", { ip: "192.0.2.52" });
      expect(sent.status).toBe(200);
      expect(sent.headers.get("RateLimit")).toBeNull();
    }

    const deny = makeEnv([rule("header:x-api-key", { missing: "deny" })]);
    const denied = await send(deny, "/", { ip: "192.0.2.53" });
    expect(denied.status).toBe(401);
    expect(denied.headers.get("Content-Type")).toBe("application/problem+json");
    expect(denied.json().detail).toContain("header:x-api-key");
  });

  it("jwt: verified claims are identities; a forged or expired token counts as missing", async () => {
    const env = makeEnv([rule("jwt:sub", { missing: "deny" })], { RATE_LIMIT_JWT_SECRET: SECRET });
    const alice = await jwtFor({ sub: "alice" });
    const aliceAgain = await jwtFor({ sub: "alice", jti: "2" });
    expect(
      await shareBucket(
        env,
        { ip: "192.0.2.60", headers: bearer(alice) },
        { ip: "192.0.2.61", headers: bearer(aliceAgain) },
      ),
    ).toBe(true);
    expect((await send(env, "/", { headers: bearer(await jwtFor({ sub: "bob" })) })).status).toBe(200);

    const forged = await jwtFor({ sub: "carol" }, { secret: "not-the-secret-at-all-0123456789abcdef" });
    expect((await send(env, "/", { headers: bearer(forged) })).status).toBe(401);
    const expired = await jwtFor({ sub: "dave" }, { expiresIn: "-1m" });
    expect((await send(env, "/", { headers: bearer(expired) })).status).toBe(401);
    const unsigned =
      `${btoa(JSON.stringify({ alg: "none" }))}.${btoa(JSON.stringify({ sub: "eve" }))}.`.replace(/=/g, "");
    expect((await send(env, "/", { headers: bearer(unsigned) })).status).toBe(401);
  });

  it("jwt: RS/ES/EdDSA tokens verify against RATE_LIMIT_JWKS_URL", async () => {
    const env = makeEnv([rule("jwt:sub", { missing: "deny" })], {
      RATE_LIMIT_JWKS_URL: `${baseEnv.ORIGIN_URL}/.well-known/jwks.json`,
    });
    const jwk = await (await fetch(`${baseEnv.ORIGIN_URL}/__test-signing-key`)).json<
      Record<string, string>
    >();
    const key = await importJWK(jwk, "ES256");
    const sign = (sub: string) =>
      new SignJWT({ sub })
        .setProtectedHeader({ alg: "ES256", kid: "test-es256" })
        .setExpirationTime("5m")
        .sign(key);
    expect(
      await shareBucket(env, { headers: bearer(await sign("zed")) }, { headers: bearer(await sign("zed")) }),
    ).toBe(true);
    expect((await send(env, "/", { headers: bearer(await sign("yan")) })).status).toBe(200);
    // An HS256 token cannot pass for a JWKS-verified one (no secret configured: the key is missing).
    expect((await send(env, "/", { headers: bearer(await jwtFor({ sub: "zed" })) })).status).toBe(401);
  });

  it("tiers: the limit follows the client's tier, an unknown tier gets the rule's own", async () => {
    const env = makeEnv(
      [rule("jwt:sub", { limit: 2, tier: "jwt:plan", tiers: { pro: { limit: 5 }, free: { limit: 1 } } })],
      { RATE_LIMIT_JWT_SECRET: SECRET },
    );
    const limitOf = async (claims: Record<string, unknown>) =>
      (await send(env, "/", { headers: bearer(await jwtFor(claims)) })).headers.get("X-RateLimit-Limit");
    expect(await limitOf({ sub: "p", plan: "pro" })).toBe("5");
    expect(await limitOf({ sub: "f", plan: "free" })).toBe("1");
    expect(await limitOf({ sub: "u", plan: "platinum" })).toBe("2");
    expect(await limitOf({ sub: "n" })).toBe("2");
    // The policy names each client's own quota, one tier after another.
    const policyOf = async (claims: Record<string, unknown>) =>
      (await send(env, "/", { headers: bearer(await jwtFor(claims)) })).headers.get("RateLimit-Policy");
    expect(await policyOf({ sub: "p", plan: "pro" })).toBe('"r";q=5;w=3600');
    expect(await policyOf({ sub: "f", plan: "free" })).toBe('"r";q=1;w=3600');
    expect(await policyOf({ sub: "p", plan: "pro" })).toBe('"r";q=5;w=3600');
  });
});
