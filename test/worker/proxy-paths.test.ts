// Another spelling of the same path: a rule still applies, the admin prefix is never proxied (with the
// operator's admin token on it), and the origin receives the path as the client sent it (src/rules/path.ts).
import { describe, expect, it } from "vitest";
import { makeEnv, newTag, originCount, send } from "./proxy-harness";

/** A rule only a request with an `x-api-key` passes, on `/deny/*`. */
const keyed = [
  {
    name: "keyed",
    match: { path: "/deny/*" },
    key: "header:x-api-key",
    missing: "deny",
    algorithm: "fixed-window",
    limit: 100,
    period: "1h",
  },
];

describe("a rule's match.path", () => {
  it("applies to every spelling an origin reads as the same path", async () => {
    const env = makeEnv(keyed);
    for (const path of [
      "/deny/x",
      "/%64eny/x",
      "/%64%65%6E%79/x",
      "//deny/x",
      "/deny%2fx",
      "/deny%2Fx",
      "/a/%2e%2e/deny/x",
      "/deny//x",
      "/%5Cdeny/x",
    ]) {
      const sent = await send(env, path, { ip: "192.0.2.80" });
      expect(sent.status, path).toBe(401);
      expect(sent.json().detail, path).toContain("x-api-key");
    }
  });

  it("still tells other paths apart, and the origin gets the path exactly as sent", async () => {
    const env = makeEnv(keyed);
    for (const path of ["/denyx", "/%64enyx/y", "/de%6Ey", "/other/deny/x", "/%C3%A9/deny/x"]) {
      const sent = await send(env, path, { ip: "192.0.2.81" });
      expect(sent.status, path).toBe(200);
      expect(sent.json().url, path).toBe(path);
    }
    const passed = await send(env, "/%64eny/x?q=1", { ip: "192.0.2.81", headers: { "x-api-key": "k" } });
    expect(passed.status).toBe(200);
    expect(passed.json().url).toBe("/%64eny/x?q=1");
  });
});

describe("a rule's match.path, read either way", () => {
  it("covers a %2F inside a segment both as one segment and as two, and a pattern written with escapes", async () => {
    const rule = (name: string, path: string) => ({
      name,
      match: { path },
      key: "ip",
      algorithm: "fixed-window",
      limit: 1,
      period: "1h",
    });
    const env = makeEnv([
      rule("segment", "/files/:name"),
      rule("split", "/files/a/*"),
      rule("spaced", "/my%20files/*"),
    ]);
    const first = await send(env, "/files/a%2Fb", { ip: "192.0.2.84" });
    expect(first.headers.get("RateLimit")).toMatch(/^"segment";r=0;t=\d+, "split";r=0;t=\d+$/);
    expect((await send(env, "/files/a%2Fb", { ip: "192.0.2.84" })).status).toBe(429);
    expect((await send(env, "/my%20files/x", { ip: "192.0.2.84" })).headers.get("RateLimit")).toMatch(
      /^"spaced";r=0/,
    );
  });
});

describe("the admin prefix spelled otherwise", () => {
  it("is never proxied: the admin token never reaches the origin", async () => {
    const token = "admin-token-for-the-spelling-test";
    const env = makeEnv(keyed, { RATE_LIMIT_ADMIN_TOKEN: token });
    const tag = newTag();
    const headers = { Authorization: `Bearer ${token}`, "x-count-tag": tag };
    for (const path of [
      "//__floodgate/rules",
      "/__floodgate%2Frules",
      "/__FLOODGATE/rules",
      "/x/../__floodgate//rules",
      "/__Floodgate",
    ]) {
      const sent = await send(env, path, { ip: "192.0.2.82", headers });
      expect(sent.status, path).toBe(404);
      expect(sent.headers.get("Content-Type"), path).toBe("application/problem+json");
      expect(sent.text, path).not.toContain(token);
    }
    // Escapes Hono's router decodes itself: the admin API answers.
    expect((await send(env, "/%5F%5Ffloodgate/rules", { headers })).json().rules).toBeDefined();
    expect(await originCount(tag)).toBe(0);
    // The exact spelling is the admin API's; a path that only starts alike is the origin's.
    expect((await send(env, "/__floodgate/rules", { headers })).status).toBe(200);
    // (without the admin token, which is never forwarded by any path: the test below)
    expect(
      (await send(env, "/__floodgatex", { ip: "192.0.2.82", headers: { "x-count-tag": tag } })).status,
    ).toBe(200);
    expect(await originCount(tag)).toBe(1);
  });

  it("is never proxied when an escaped slash and a dot segment lead out of it", async () => {
    const token = "admin-token-for-the-dot-segment-test";
    const env = makeEnv(keyed, { RATE_LIMIT_ADMIN_TOKEN: token });
    const tag = newTag();
    const headers = { Authorization: `Bearer ${token}`, "x-count-tag": tag };
    // Their canonical path is `/c/x`, but an origin that resolves `..` before decoding reads the prefix.
    for (const path of ["/__floodgate%2F..%2Fc/x", "/__floodgate%2f../c/x", "/__FLOODGATE%2F%2E%2E/c/x"]) {
      const sent = await send(env, path, { ip: "192.0.2.85", headers });
      expect(sent.status, path).toBe(404);
      expect(sent.text, path).not.toContain(token);
    }
    expect(await originCount(tag)).toBe(0);
    // Escapes that lead nowhere near the prefix still reach the origin.
    expect(
      (await send(env, "/c%2F..%2Fd/x", { ip: "192.0.2.85", headers: { "x-count-tag": tag } })).status,
    ).toBe(200);
    expect(await originCount(tag)).toBe(1);
  });

  it("never forwards the admin token, by whatever path it comes", async () => {
    const token = "admin-token-for-the-forwarding-test-0123456789";
    const env = makeEnv(keyed, { RATE_LIMIT_ADMIN_TOKEN: token });
    const tag = newTag();
    // Spellings no prefix check foresees: a path parameter some origins strip, a double escape, any path.
    for (const path of ["/__floodgate;a/rules", "/__floodgate%252F..%252Fc/x", "/anything"]) {
      const sent = await send(env, path, {
        ip: "192.0.2.86",
        headers: { Authorization: `Bearer ${token}`, "x-count-tag": tag },
      });
      expect(sent.status, path).toBe(400);
      expect(sent.text, path).not.toContain(token);
    }
    expect(await originCount(tag)).toBe(0);
    // Another bearer token, even one of the same length, is the client's own and goes through.
    const other = `Bearer ${"x".repeat(token.length)}`;
    const sent = await send(env, "/anything", {
      ip: "192.0.2.86",
      headers: { Authorization: other, "x-count-tag": tag },
    });
    expect(sent.status).toBe(200);
    expect(await originCount(tag)).toBe(1);
  });
});

describe("an origin's status HTTP does not define", () => {
  it("is a 502 problem, and a concurrency slot is given back", async () => {
    const env = makeEnv([
      { name: "one-at-a-time", key: "ip", algorithm: "concurrency", limit: 1, period: "1m" },
    ]);
    for (const code of [600, 999]) {
      const sent = await send(env, `/status/${code}`, { ip: "192.0.2.83" });
      expect(sent.status).toBe(502);
      expect(sent.json()).toMatchObject({
        title: "Bad Gateway",
        detail: expect.stringContaining(String(code)),
      });
    }
    expect((await send(env, "/after", { ip: "192.0.2.83" })).status).toBe(200);
  });
});
