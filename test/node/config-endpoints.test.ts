/**
 * Several databases in the bindings: `UPSTASH_REDIS_REST_URL` lists endpoints separated by commas, the token
 * binding holds one token for all or one per endpoint; a mistake names the binding and never shows a token.
 */
import { describe, expect, it } from "vitest";
import { ConfigError, parseEnv } from "../../src/config";
import type { Env } from "../../src/env";
import { rateLimit } from "../../src/middleware";

const RULES = JSON.stringify([
  { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 10, period: "1m" },
]);
const SECRET = "s3cret-token-AAAA";

const parse = (url: string, token: string) =>
  parseEnv({
    ORIGIN_URL: "https://origin.example.com",
    UPSTASH_REDIS_REST_URL: url,
    UPSTASH_REDIS_REST_TOKEN: token,
    RATE_LIMIT_RULES: RULES,
  } as unknown as Env);

/** The ConfigError's message for a bad pair of bindings. */
function problem(url: string, token: string): string {
  try {
    parse(url, token);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error("expected a ConfigError");
}

describe("Redis endpoints in the bindings", () => {
  it("takes one URL and its token exactly as given", () => {
    const config = parse("https://one.upstash.io/", "tok,en");
    expect(config.redisEndpoints).toEqual([{ url: "https://one.upstash.io/", token: "tok,en" }]);
  });

  it("lists several endpoints in order, sharing one token or with one token each", () => {
    const shared = parse("https://a.upstash.io, https://b.upstash.io,https://c.upstash.io", SECRET);
    expect(shared.redisEndpoints).toEqual([
      { url: "https://a.upstash.io", token: SECRET },
      { url: "https://b.upstash.io", token: SECRET },
      { url: "https://c.upstash.io", token: SECRET },
    ]);
    const own = parse("https://a.upstash.io,https://b.upstash.io", "ta, tb");
    expect(own.redisEndpoints.map((e) => e.token)).toEqual(["ta", "tb"]);
  });

  it("trims a single URL, as it trims each of a list", () => {
    expect(parse(" https://one.upstash.io \n", SECRET).redisEndpoints).toEqual([
      { url: "https://one.upstash.io", token: SECRET },
    ]);
  });

  it("rejects a URL the REST client cannot use, showing its scheme and host but never its credentials", () => {
    // Upstash also hands out a `redis://` URL with the password in it: pasted here by mistake, it must
    // be a config error (the client would throw, URL and all), and the message must not carry the password.
    const pasted = problem(`redis://default:${SECRET}@eu1-cool-bee.upstash.io:6379`, SECRET);
    expect(pasted).toMatch(
      /^UPSTASH_REDIS_REST_URL: "redis:\/\/eu1-cool-bee.upstash.io:6379" is not an http\(s\) URL/,
    );
    expect(pasted).not.toContain(SECRET);
    const queried = problem(`https://a.upstash.io,https://b.upstash.io?token=${SECRET}#x y`, "t");
    expect(queried).toMatch(/\(endpoint 2 of 2\): "https:\/\/b.upstash.io" is not an http\(s\) URL/);
    expect(queried).not.toContain(SECRET);
    const origin = () =>
      parseEnv({
        ORIGIN_URL: `https://origin.example.com/?api_key=${SECRET}`,
        UPSTASH_REDIS_REST_URL: "https://one.upstash.io",
        UPSTASH_REDIS_REST_TOKEN: "t",
        RATE_LIMIT_RULES: RULES,
      } as unknown as Env);
    expect(origin).toThrow(
      /ORIGIN_URL: "https:\/\/origin.example.com" is not an http\(s\) URL without query/,
    );
    expect(origin).toThrow(expect.objectContaining({ message: expect.not.stringContaining(SECRET) }));
  });

  it("names the binding and the endpoint that is wrong, and never echoes a token", () => {
    expect(problem("https://a.upstash.io,not a url", SECRET)).toMatch(
      /UPSTASH_REDIS_REST_URL \(endpoint 2 of 2\): the value is not an http\(s\) URL/,
    );
    expect(problem("https://a.upstash.io,https://a.upstash.io", SECRET)).toMatch(
      /UPSTASH_REDIS_REST_URL: "https:\/\/a.upstash.io" is listed twice/,
    );
    expect(problem("https://a.upstash.io,", SECRET)).toMatch(
      /UPSTASH_REDIS_REST_URL \(endpoint 2 of 2\): the value is not an http\(s\) URL/,
    );
    const count = problem("https://a.io,https://b.io,https://c.io", `${SECRET},${SECRET}`);
    expect(count).toMatch(/UPSTASH_REDIS_REST_TOKEN: has 2 comma-separated tokens for the 3 endpoints/);
    expect(count).not.toContain(SECRET);
    const empty = problem("https://a.io,https://b.io", `${SECRET},`);
    expect(empty).toMatch(/UPSTASH_REDIS_REST_TOKEN: token 2 of 2 is empty/);
    expect(empty).not.toContain(SECRET);
  });

  it("rejects a token that cannot be sent as an HTTP header value, naming the binding and never showing it", () => {
    // fetch refuses such a header: every decision would fail, fail-open, with a log line blaming the URL.
    for (const token of [`tok\x01en`, `${SECRET}\r\nX-Injected: 1`, `tok\u00e9n`, `tok\x7fen`]) {
      const message = problem("https://one.upstash.io", token);
      expect(message).toMatch(/^UPSTASH_REDIS_REST_TOKEN: cannot be sent as an HTTP header value/);
      expect(message).not.toContain(token);
      expect(message).not.toContain(SECRET);
    }
    // One bad token among several names the same binding.
    expect(problem("https://a.upstash.io,https://b.upstash.io", `${SECRET},t\x01b`)).toMatch(
      /^UPSTASH_REDIS_REST_TOKEN: cannot be sent as an HTTP header value/,
    );
    // Whitespace at the ends (a secret piped with its newline) is stripped by fetch: it still works.
    expect(parse("https://one.upstash.io", `${SECRET}\n`).redisEndpoints).toHaveLength(1);
    expect(parse("https://one.upstash.io", "AX_base64+/=").redisEndpoints).toHaveLength(1);
  });

  it("takes one token per endpoint written across lines, each trimmed, but not a line break inside a token", () => {
    // A list in wrangler.toml's multi-line strings, or a secret pasted one token per line.
    const urls = "https://a.upstash.io,\n  https://b.upstash.io,\r\n\thttps://c.upstash.io\n";
    expect(parse(urls, "ta,\ntb,\r\n\ttc\n").redisEndpoints).toEqual([
      { url: "https://a.upstash.io", token: "ta" },
      { url: "https://b.upstash.io", token: "tb" },
      { url: "https://c.upstash.io", token: "tc" },
    ]);
    const inside = problem(urls, `${SECRET},\nt\nb,tc`);
    expect(inside).toMatch(/^UPSTASH_REDIS_REST_TOKEN: cannot be sent as an HTTP header value/);
    expect(inside).not.toContain(SECRET);
    // One endpoint takes its token whole (it may hold a comma): a line break after the comma is inside it.
    expect(problem("https://one.upstash.io", "t1,\nt2")).toMatch(
      /^UPSTASH_REDIS_REST_TOKEN: cannot be sent as an HTTP header value/,
    );
  });

  it("rejects such a token in rateLimit()'s redis.token as well", () => {
    const rules = [
      { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 10, period: "1m" },
    ] as const;
    const build = () =>
      rateLimit({ redis: { url: "https://one.upstash.io", token: "tok\x01en" }, rules: [...rules] });
    expect(build).toThrow(ConfigError);
    expect(build).toThrow(
      /^redis\.token \(UPSTASH_REDIS_REST_TOKEN\): cannot be sent as an HTTP header value/,
    );
    expect(() =>
      rateLimit({ redis: { url: "https://one.upstash.io", token: SECRET }, rules: [...rules] }),
    ).not.toThrow();
  });

  it("rejects an admin token that no `Authorization: Bearer` header can carry, never showing it", () => {
    const withAdmin = (token: string) => () =>
      parseEnv({
        ORIGIN_URL: "https://origin.example.com",
        UPSTASH_REDIS_REST_URL: "https://one.upstash.io",
        UPSTASH_REDIS_REST_TOKEN: SECRET,
        RATE_LIMIT_RULES: RULES,
        RATE_LIMIT_ADMIN_TOKEN: token,
      } as unknown as Env);
    for (const token of ["adm\x01in", "admin token", "adm\nin", "adm\u00efn"]) {
      expect(withAdmin(token)).toThrow(
        /^RATE_LIMIT_ADMIN_TOKEN: cannot be sent as `Authorization: Bearer <token>`/,
      );
      expect(withAdmin(token)).toThrow(
        expect.objectContaining({ message: expect.not.stringContaining(token) }),
      );
    }
    expect(withAdmin("Adm1n-t0ken_~+/=").call(undefined).adminToken).toBe("Adm1n-t0ken_~+/=");
    // Piped in with its newline (`echo … | wrangler secret put`): the token is what the operator sends.
    expect(withAdmin(" admin-token-0123456\n").call(undefined).adminToken).toBe("admin-token-0123456");
    expect(withAdmin("").call(undefined).adminToken).toBeFalsy(); // unset: the admin API is off
  });
});
