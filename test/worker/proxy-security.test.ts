// What a client controls and may not turn against the limit or the operator (docs/security.md), on the real
// Worker against real Redis: a query key's spelling, and the admin token in an `Authorization` header of any
// form, which never reaches the origin.
import { describe, expect, it } from "vitest";
import { makeEnv, newTag, originCount, send } from "./proxy-harness";

describe("a query key", () => {
  it("is trimmed as a header is: `?key=Q1%20` shares `?key=Q1`'s bucket", async () => {
    const env = makeEnv([
      { name: "per-key", key: "query:key", algorithm: "fixed-window", limit: 2, period: "1h" },
    ]);
    const statuses: number[] = [];
    for (const query of ["key=Q1", "key=Q1%20", "key=%20Q1", "key=Q1%09", "key=Q1%20%20"]) {
      statuses.push((await send(env, `/api?${query}`, { ip: "192.0.2.90" })).status);
    }
    expect(statuses).toEqual([200, 200, 429, 429, 429]);
    // Nothing but spaces is no key: the rule's `missing` (the client IP) applies.
    expect((await send(env, "/api?key=%20%20", { ip: "192.0.2.91" })).status).toBe(200);
  });
});

describe("the admin token in an Authorization header", () => {
  const token = "admin-token-for-the-authorization-forms-0123";
  const keyed = [{ name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 100, period: "1h" }];

  it("is never forwarded to the origin, in any scheme, quoted, in a list or base64-encoded", async () => {
    const env = makeEnv(keyed, { RATE_LIMIT_ADMIN_TOKEN: token });
    const tag = newTag();
    for (const authorization of [
      `Bearer ${token}, x`,
      `Bearer "${token}"`,
      `Token ${token}`,
      `token=${token}`,
      `bearer    ${token}   `,
      `Basic ${btoa(`admin:${token}`)}`,
      `Bearer abc, Basic ${btoa(`${token}:`)}`,
      `Digest username="ops", response="${token}"`,
    ]) {
      const sent = await send(env, "/anything", {
        ip: "192.0.2.92",
        headers: { Authorization: authorization, "x-count-tag": tag },
      });
      expect(sent.status, authorization).toBe(400);
      expect(sent.text, authorization).not.toContain(token);
    }
    expect(await originCount(tag)).toBe(0);
  });

  it("lets through the client's own credentials, even ones as long as the token or sharing most of it", async () => {
    const env = makeEnv(keyed, { RATE_LIMIT_ADMIN_TOKEN: token });
    const tag = newTag();
    for (const authorization of [
      `Bearer ${"x".repeat(token.length)}`,
      `Bearer ${token.slice(0, -1)}`,
      `Bearer ${token.slice(1)}X`,
      `Basic ${btoa("user:password")}`,
      "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJl",
    ]) {
      const sent = await send(env, "/anything", {
        ip: "192.0.2.93",
        headers: { Authorization: authorization, "x-count-tag": tag },
      });
      expect(sent.status, authorization).toBe(200);
    }
    expect(await originCount(tag)).toBe(5);
  });
});
