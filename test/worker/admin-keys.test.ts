import { describe, expect, it } from "vitest";
import { hashIdentity } from "../../src/engine/keys";
import { awayFromWindowEdge } from "../support/window-edge";
import { call, makeEnv, send } from "./admin-harness";

const PREFIX = "t-admin-keys";
const RULES = [
  { name: "api", key: "header:x-api-key", algorithm: "fixed-window", limit: 3, period: "1m" },
  { name: "burst", key: "header:x-api-key", algorithm: "token-bucket", limit: 2, period: "1h", burst: 2 },
];
/** The api rule's window: a fixed minute, which must not turn while a test counts requests in it. */
const MINUTE = 60_000;
const testEnv = makeEnv(PREFIX, [RULES[0]]);
const tieredEnv = makeEnv(`${PREFIX}-tier`, [
  { ...RULES[0], name: "tiered", tier: "header:x-plan", tiers: { pro: { limit: 50, period: "1h" } } },
]);
const bucketEnv = makeEnv(`${PREFIX}-tb`, [RULES[1]]);

const request = (env: Record<string, unknown>, apiKey: string) =>
  call(env, "/anything", { headers: { "x-api-key": apiKey }, ip: "198.51.100.7" });

interface KeyState {
  rule: string;
  identity: string;
  allowed: boolean;
  limit: number;
  remaining: number;
  reset_after: number;
  retry_after: number;
  override: null | { limit: number };
}
const state = async (env: Record<string, unknown>, rule: string, identity: string) => {
  const response = await call(env, `/__floodgate/keys/${rule}/${identity}`);
  expect(response.status).toBe(200);
  return (await response.json()) as KeyState;
};

describe("keys: what one client is experiencing", () => {
  it("shows a client's state without counting the look", async () => {
    await awayFromWindowEdge(MINUTE, 5_000);
    const fresh = await state(testEnv, "api", "key-look");
    expect(fresh).toMatchObject({ rule: "api", allowed: true, limit: 3, remaining: 3, override: null });
    expect(fresh.identity).toBe(`hash:${await hashIdentity("key-look")}`);
    await state(testEnv, "api", "key-look");
    expect((await request(testEnv, "key-look")).status).toBe(200);
    expect(await state(testEnv, "api", "key-look")).toMatchObject({ allowed: true, remaining: 2 });
    // Three looks did not use the client's quota: it still has exactly two requests.
    expect((await request(testEnv, "key-look")).status).toBe(200);
    expect((await request(testEnv, "key-look")).status).toBe(200);
    expect((await request(testEnv, "key-look")).status).toBe(429);
  });

  it("explains why a blocked client is blocked, and a reset lets it through at once", async () => {
    await awayFromWindowEdge(MINUTE, 5_000);
    for (let i = 0; i < 3; i++) expect((await request(testEnv, "key-blocked")).status).toBe(200);
    const denied = await request(testEnv, "key-blocked");
    expect(denied.status).toBe(429);
    const blocked = await state(testEnv, "api", "key-blocked");
    expect(blocked).toMatchObject({ allowed: false, limit: 3, remaining: 0 });
    expect(blocked.retry_after).toBeGreaterThanOrEqual(1);
    expect(blocked.retry_after).toBeLessThanOrEqual(60);

    const reset = await call(testEnv, "/__floodgate/keys/api/key-blocked", { method: "DELETE" });
    expect(reset.status).toBe(200);
    expect(await reset.json()).toMatchObject({ rule: "api", reset: true });
    const after = await request(testEnv, "key-blocked");
    expect(after.status).toBe(200);
    expect(after.headers.get("X-RateLimit-Remaining")).toBe("2");
  });

  it("resets counters only: the override stays", async () => {
    await send(testEnv, "PUT", "/__floodgate/overrides/api/key-kept", { limit: 10 });
    await request(testEnv, "key-kept");
    await call(testEnv, "/__floodgate/keys/api/key-kept", { method: "DELETE" });
    expect(await state(testEnv, "api", "key-kept")).toMatchObject({
      limit: 10,
      remaining: 10,
      override: { limit: 10 },
    });
  });

  it("works for every algorithm's state (token bucket here)", async () => {
    for (let i = 0; i < 2; i++) expect((await request(bucketEnv, "key-tb")).status).toBe(200);
    expect((await request(bucketEnv, "key-tb")).status).toBe(429);
    expect(await state(bucketEnv, "burst", "key-tb")).toMatchObject({ allowed: false, remaining: 0 });
    await call(bucketEnv, "/__floodgate/keys/burst/key-tb", { method: "DELETE" });
    expect((await request(bucketEnv, "key-tb")).status).toBe(200);
  });

  it("shows the state under a tier's limits when asked for that tier", async () => {
    await call(tieredEnv, "/anything", { headers: { "x-api-key": "key-pro", "x-plan": "pro" } });
    expect(await state(tieredEnv, "tiered", "key-pro?tier=pro")).toMatchObject({
      tier: "pro",
      limit: 50,
      remaining: 49,
    });
    // Without a tier (or an unknown one), the rule's own limit, as the proxy would apply.
    expect(await state(tieredEnv, "tiered", "key-pro?tier=gold")).toMatchObject({ tier: null, limit: 3 });
    const rules = (await (await call(tieredEnv, "/__floodgate/rules")).json()) as {
      rules: Array<{ tiers: unknown }>;
    };
    expect(rules.rules[0]?.tiers).toEqual({ pro: { limit: 50, period: "1h" } });
  });

  it("names a client by its hash in base64url (as lists show) or in hex (hash:<hex>)", async () => {
    expect((await request(testEnv, "key-by-hash")).status).toBe(200);
    const hashed = await hashIdentity("key-by-hash");
    const hex = [...atob(hashed.replace(/-/g, "+").replace(/_/g, "/"))]
      .map((ch) => ch.charCodeAt(0).toString(16).padStart(2, "0"))
      .join("");
    expect(hex).toMatch(/^[0-9a-f]{32}$/);
    for (const name of [`hash:${hashed}`, `hash:${hex}`, `hash:${hex.toUpperCase()}`]) {
      expect(await state(testEnv, "api", name)).toMatchObject({ identity: `hash:${hashed}`, remaining: 2 });
    }
  });

  it("finds an IP-keyed client however its address is written, as the proxy does", async () => {
    const ipEnv = makeEnv(`${PREFIX}-ip`, [
      { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 5, period: "1m" },
    ]);
    expect((await call(ipEnv, "/anything", { ip: "2001:db8::1" })).status).toBe(200);
    for (const written of ["2001:db8::1", "2001:DB8:0:0::1", "2001:0db8::0001"]) {
      expect(await state(ipEnv, "per-ip", encodeURIComponent(written))).toMatchObject({ remaining: 4 });
    }
  });

  it("answers 404 for an unknown rule, 400 for a malformed hash, 401 without the token", async () => {
    expect((await call(testEnv, "/__floodgate/keys/ghost/key")).status).toBe(404);
    expect((await call(testEnv, "/__floodgate/keys/ghost/key", { method: "DELETE" })).status).toBe(404);
    expect((await call(testEnv, "/__floodgate/keys/api/hash:!!")).status).toBe(400);
    for (const token of [null, "wrong"]) {
      expect((await call(testEnv, "/__floodgate/keys/api/key", { token })).status).toBe(401);
      expect((await call(testEnv, "/__floodgate/keys/api/key", { token, method: "DELETE" })).status).toBe(
        401,
      );
    }
  });
});

describe("an override raises a client's limit, then (after its TTL) drops it again", () => {
  it("takes effect on the very next request and expires on its own", async () => {
    await awayFromWindowEdge(MINUTE, 10_000); // it sleeps out the override's TTL in between
    for (let i = 0; i < 3; i++) expect((await request(testEnv, "key-vip")).status).toBe(200);
    expect((await request(testEnv, "key-vip")).status).toBe(429);

    const put = await send(testEnv, "PUT", "/__floodgate/overrides/api/key-vip", { limit: 6, ttl: 1 });
    expect(put.status).toBe(200);
    const raised = await request(testEnv, "key-vip");
    expect(raised.status).toBe(200);
    expect(raised.headers.get("X-RateLimit-Limit")).toBe("6");
    expect(raised.headers.get("X-RateLimit-Remaining")).toBe("2");
    expect((await request(testEnv, "key-vip")).status).toBe(200);
    expect(await state(testEnv, "api", "key-vip")).toMatchObject({
      limit: 6,
      remaining: 1,
      override: { limit: 6 },
    });

    await new Promise((resolve) => setTimeout(resolve, 1100));
    const dropped = await request(testEnv, "key-vip");
    expect(dropped.status).toBe(429);
    expect(dropped.headers.get("X-RateLimit-Limit")).toBe("3");
    expect(await state(testEnv, "api", "key-vip")).toMatchObject({ limit: 3, override: null });
  });
});
