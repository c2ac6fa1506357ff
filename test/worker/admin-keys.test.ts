import { beforeEach, describe, expect, it } from "vitest";
import { hashIdentity, resetFenceKey, stateKey } from "../../src/engine/keys";
import { awayFromWindowEdge } from "../support/window-edge";
import { call, makeEnv, redis, send, uniquePrefix } from "./admin-harness";
import { send as through } from "./proxy-harness";

// Fixed windows of an hour: none of these tests depends on the window's length, and an hour turns while a
// test counts requests far less often than a minute would.
const RULES = [
  { name: "api", key: "header:x-api-key", algorithm: "fixed-window", limit: 3, period: "1h" },
  { name: "burst", key: "header:x-api-key", algorithm: "token-bucket", limit: 2, period: "1h", burst: 2 },
];
const HOUR = 3_600_000;
// Each test its own prefix (so its own counters, overrides and isolates): nothing carries over between
// tests, or from an earlier run in watch mode.
const newApiEnv = () => makeEnv(uniquePrefix("admin-keys"), [RULES[0]]);
const newTieredEnv = () =>
  makeEnv(uniquePrefix("admin-keys-tier"), [
    { ...RULES[0], name: "tiered", tier: "header:x-plan", tiers: { pro: { limit: 50, period: "1h" } } },
  ]);
const newBucketEnv = () => makeEnv(uniquePrefix("admin-keys-tb"), [RULES[1]]);

// The hour must not turn while a test counts requests in it: in the last 5 s of an hour (1 run in 720),
// wait for the next one.
beforeEach(() => awayFromWindowEdge(HOUR, 5_000));

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
  delay: number;
  override: null | { limit: number };
}
const state = async (env: Record<string, unknown>, rule: string, identity: string) => {
  const response = await call(env, `/__floodgate/keys/${rule}/${identity}`);
  expect(response.status).toBe(200);
  return (await response.json()) as KeyState;
};

describe("keys: a reset's fence outlives its window by at most one period", () => {
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  /** Resets `identity` under the env's one rule; the fence's PTTL right after, ms (-2: none). */
  async function resetAndFence(
    env: ReturnType<typeof makeEnv>,
    rule: string,
    identity: string,
    /** `true`: a reset that found nothing (the window ended in between) is left to the caller. */
    mayRetry = false,
  ) {
    expect((await call(env, "/anything", { headers: { "x-api-key": identity } })).status).toBe(200);
    const reset = await call(env, `/__floodgate/keys/${rule}/${identity}`, { method: "DELETE" });
    const body = (await reset.json()) as { reset?: boolean };
    if (!(mayRetry && body.reset === false)) expect(body).toMatchObject({ rule, reset: true });
    const fence = resetFenceKey(env.RATE_LIMIT_PREFIX, rule, await hashIdentity(identity));
    return { fence, pttl: await redis.pttl(fence) };
  }

  /** Redis's clock, ms: the one a fixed window's counter expires by. */
  const redisNowMs = async () => {
    const [seconds, micros] = await redis.time();
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  };

  it("a 1 s fixed window: the fence stands at most one period, and is gone two periods on", async () => {
    const env = makeEnv(uniquePrefix("fence-fw"), [
      { name: "short", key: "header:x-api-key", algorithm: "fixed-window", limit: 5, period: "1s" },
    ]);
    // The request's counter expires at its window's end, and a reset that finds nothing to delete answers
    // `reset: false`: both must fall in one window by Redis's clock. Begin each attempt at the start of a window,
    // and try again (a new identity) when the machine's load stretched the two over a window's end.
    let fenced: { fence: string; pttl: number } | undefined;
    for (let attempt = 0; fenced === undefined; attempt++) {
      for (let into = (await redisNowMs()) % 1000; into > 150; into = (await redisNowMs()) % 1000) {
        await sleep(1000 - into);
      }
      const window = Math.floor((await redisNowMs()) / 1000);
      const result = await resetAndFence(env, "short", `key-short-${attempt}`, attempt < 4);
      if (Math.floor((await redisNowMs()) / 1000) === window || attempt >= 4) fenced = result;
    }
    const { fence, pttl } = fenced;
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(1000);
    await sleep(2000);
    expect(await redis.exists(fence)).toBe(0);
  });

  it("a 10 s token bucket: the capacity and its longest lease (a quarter), no more", async () => {
    const env = makeEnv(uniquePrefix("fence-tb"), [
      { name: "short", key: "header:x-api-key", algorithm: "token-bucket", limit: 4, period: "10s" },
    ]);
    const { pttl } = await resetAndFence(env, "short", "key-short");
    expect(pttl).toBeGreaterThan(10_000);
    expect(pttl).toBeLessThanOrEqual(12_501);
  });

  it("the longest of the limits the units may have been taken under: a tier's, the identity's override's", async () => {
    const env = makeEnv(uniquePrefix("fence-limits"), [
      {
        name: "short",
        key: "header:x-api-key",
        algorithm: "sliding-window",
        limit: 5,
        period: "1s",
        tier: "header:x-plan",
        tiers: { pro: { limit: 50, period: "3s" } },
      },
    ]);
    const tiered = await resetAndFence(env, "short", "key-tier");
    expect(tiered.pttl).toBeGreaterThan(2000);
    expect(tiered.pttl).toBeLessThanOrEqual(3000);
    await send(env, "PUT", "/__floodgate/overrides/short/key-over", { limit: 5, period: "10s" });
    const overridden = await resetAndFence(env, "short", "key-over");
    expect(overridden.pttl).toBeGreaterThan(9000);
    expect(overridden.pttl).toBeLessThanOrEqual(10_000);
  });

  it("an override removed, then a reset: the reset keeps the longer fence the removal left", async () => {
    // A lease taken under the override's hour may still be returned after both; the reset alone would size
    // its fence for the rule's 1 s, and a return landing after that could pass for the fresh counter's.
    const env = makeEnv(uniquePrefix("fence-after-override"), [
      { name: "short", key: "header:x-api-key", algorithm: "fixed-window", limit: 5, period: "1s" },
    ]);
    await send(env, "PUT", "/__floodgate/overrides/short/key-over", { limit: 1000, period: "1h" });
    expect((await call(env, "/__floodgate/overrides/short/key-over", { method: "DELETE" })).status).toBe(204);
    const fence = resetFenceKey(env.RATE_LIMIT_PREFIX, "short", await hashIdentity("key-over"));
    expect(await redis.pttl(fence)).toBeGreaterThan(25_000); // as long as a return can take: 30 s at most
    const { pttl } = await resetAndFence(env, "short", "key-over");
    expect(pttl).toBeGreaterThan(25_000);
    expect(pttl).toBeLessThanOrEqual(30_000);
  });

  it("a sliding log needs none: its returns remove members by name, and the reset removed them", async () => {
    const env = makeEnv(uniquePrefix("fence-log"), [
      { name: "log", key: "header:x-api-key", algorithm: "sliding-log", limit: 5, period: "1s" },
    ]);
    expect((await resetAndFence(env, "log", "key-log")).pttl).toBe(-2);
  });
});

describe("keys: what one client is experiencing", () => {
  it("shows a client's state without counting the look", async () => {
    const testEnv = newApiEnv();
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
    const testEnv = newApiEnv();
    for (let i = 0; i < 3; i++) expect((await request(testEnv, "key-blocked")).status).toBe(200);
    const denied = await request(testEnv, "key-blocked");
    expect(denied.status).toBe(429);
    const blocked = await state(testEnv, "api", "key-blocked");
    expect(blocked).toMatchObject({ allowed: false, limit: 3, remaining: 0 });
    expect(blocked.retry_after).toBeGreaterThanOrEqual(1);
    expect(blocked.retry_after).toBeLessThanOrEqual(HOUR / 1000); // the end of the rule's window

    const reset = await call(testEnv, "/__floodgate/keys/api/key-blocked", { method: "DELETE" });
    expect(reset.status).toBe(200);
    expect(await reset.json()).toMatchObject({ rule: "api", reset: true });
    const after = await request(testEnv, "key-blocked");
    expect(after.status).toBe(200);
    expect(after.headers.get("X-RateLimit-Remaining")).toBe("2");
  });

  it("resets counters only: the override stays", async () => {
    const testEnv = newApiEnv();
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
    const bucketEnv = newBucketEnv();
    for (let i = 0; i < 2; i++) expect((await request(bucketEnv, "key-tb")).status).toBe(200);
    expect((await request(bucketEnv, "key-tb")).status).toBe(429);
    expect(await state(bucketEnv, "burst", "key-tb")).toMatchObject({ allowed: false, remaining: 0 });
    await call(bucketEnv, "/__floodgate/keys/burst/key-tb", { method: "DELETE" });
    expect((await request(bucketEnv, "key-tb")).status).toBe(200);
  });

  it("says a client past its burst is held, not blocked, under a rule with a delay", async () => {
    const env = makeEnv(uniquePrefix("admin-keys-delay"), [
      {
        name: "held",
        key: "header:x-api-key",
        algorithm: "gcra",
        limit: 10,
        period: "10s",
        burst: 2,
        delay: "5s",
      },
    ]);
    for (let i = 0; i < 2; i++) expect((await request(env, "key-held")).status).toBe(200);
    const held = await state(env, "held", "key-held");
    expect(held).toMatchObject({ allowed: true, retry_after: 0 });
    expect(held.delay).toBe(1); // the next unit, a second away
  });

  it("tells a client of a full concurrency rule to retry when the proxy's 429 does, not after the lease", async () => {
    const env = makeEnv(uniquePrefix("admin-keys-conc"), [
      { name: "one-at-once", key: "header:x-api-key", algorithm: "concurrency", limit: 1, period: "30s" },
    ]);
    const headers = { "x-api-key": "key-busy" };
    const busy = through(env, "/slow?ms=2000", { headers }); // holds the one slot for 2 s
    await expect.poll(async () => (await state(env, "one-at-once", "key-busy")).allowed).toBe(false);
    const denied = await through(env, "/x", { headers });
    expect(denied.status).toBe(429);
    expect(denied.headers.get("Retry-After")).toBe("1");
    const full = await state(env, "one-at-once", "key-busy");
    expect(full).toMatchObject({ allowed: false, remaining: 0, retry_after: denied.json().retry_after });
    expect(full.retry_after).toBe(1);
    expect((await busy).status).toBe(200);
  });

  it("shows the state under a tier's limits when asked for that tier", async () => {
    const tieredEnv = newTieredEnv();
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
    const testEnv = newApiEnv();
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
    const ipEnv = makeEnv(uniquePrefix("admin-keys-ip"), [
      { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 5, period: "1h" },
    ]);
    expect((await call(ipEnv, "/anything", { ip: "2001:db8::1" })).status).toBe(200);
    for (const written of ["2001:db8::1", "2001:DB8:0:0::1", "2001:0db8::0001"]) {
      expect(await state(ipEnv, "per-ip", encodeURIComponent(written))).toMatchObject({ remaining: 4 });
    }
  });

  it("answers 404 for an unknown rule, 400 for a malformed hash, 401 without the token", async () => {
    const testEnv = newApiEnv();
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
    const testEnv = newApiEnv();
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

describe("keys: a shed rule's budget, all of its sub-keys", () => {
  // 5 in flight over 2 sub-keys (3 and 2 slots); `low` may fill ⌊3 × 0.6⌋ + ⌊2 × 0.6⌋ = 2 of them.
  const SHED = {
    name: "origin",
    key: "global",
    algorithm: "shed",
    limit: 5,
    shards: 2,
    priority: "header:x-priority",
    priorities: { critical: 1, low: 0.6 },
  };
  interface ShedState extends KeyState {
    in_flight: number;
    classes: Record<string, { share: number; shed_above: number; admitted_on: number }>;
    sub_keys: Array<{ identity: string; limit: number; in_flight: number }>;
  }
  const subKeys = () => Promise.all([0, 1].map((n) => hashIdentity(`global#${n}`)));

  it("shows the slots held on every sub-key, and a reset frees them all", async () => {
    const prefix = uniquePrefix("admin-keys-shed");
    const env = makeEnv(prefix, [SHED]);
    const [first = "", second = ""] = await subKeys();
    const fresh = (await state(env, "origin", "global")) as ShedState;
    expect(fresh).toEqual({
      rule: "origin",
      identity: `hash:${await hashIdentity("global")}`,
      algorithm: "shed",
      tier: null,
      allowed: true,
      limit: 5,
      in_flight: 0,
      remaining: 5,
      reset_after: 0,
      retry_after: 0,
      classes: {
        critical: { share: 1, shed_above: 5, admitted_on: 2 },
        low: { share: 0.6, shed_above: 2, admitted_on: 2 },
      },
      sub_keys: [
        { identity: `hash:${first}`, limit: 3, in_flight: 0 },
        { identity: `hash:${second}`, limit: 2, in_flight: 0 },
      ],
      override: null,
    });

    // 30 slow requests at once: each sub-key gets more than it holds, so 5 are admitted (held 4 s) and the
    // other 25 are shed at once. Once those 25 have answered, every request has been decided.
    let answered = 0;
    const pending = Array.from({ length: 30 }, () =>
      through(env, "/slow?ms=4000", { headers: { "x-priority": "critical" } }).then((r) => {
        answered++;
        return r.status;
      }),
    );
    for (let waited = 0; answered < 25 && waited < 3000; waited += 50) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(answered).toBe(25);
    const full = (await state(env, "origin", "global")) as ShedState;
    expect(full).toMatchObject({ allowed: false, limit: 5, in_flight: 5, remaining: 0, retry_after: 1 });
    expect(full.reset_after).toBeGreaterThan(0); // the slots' lease, if no response finished first
    expect(full.classes).toEqual({
      critical: { share: 1, shed_above: 5, admitted_on: 0 },
      low: { share: 0.6, shed_above: 2, admitted_on: 0 },
    });
    expect(full.sub_keys.map((k) => k.in_flight)).toEqual([3, 2]);
    // The dashboard lists sub-keys by hash: each names the whole budget.
    for (const hash of [first, second]) {
      expect(await state(env, "origin", `hash:${hash}`)).toMatchObject({
        identity: full.identity,
        in_flight: 5,
      });
    }

    const reset = await call(env, "/__floodgate/keys/origin/global", { method: "DELETE" });
    expect(await reset.json()).toEqual({ rule: "origin", identity: full.identity, reset: true });
    for (const hash of [first, second]) expect(await redis.exists(stateKey(prefix, "origin", hash))).toBe(0);
    expect(await state(env, "origin", "global")).toMatchObject({ allowed: true, in_flight: 0, remaining: 5 });
    // The budget is free again while the 5 requests are still at the origin.
    expect((await through(env, "/now", { headers: { "x-priority": "critical" } })).status).toBe(200);
    expect((await Promise.all(pending)).filter((status) => status === 200)).toHaveLength(5);
  }, 30_000);

  it("asks for a per-identity budget by its value: a hash cannot name its sub-keys", async () => {
    const env = makeEnv(uniquePrefix("admin-keys-shed-tenant"), [{ ...SHED, key: "header:x-tenant" }]);
    expect((await through(env, "/now", { headers: { "x-tenant": "acme" } })).status).toBe(200);
    expect(await state(env, "origin", "acme")).toMatchObject({
      identity: `hash:${await hashIdentity("acme")}`,
      in_flight: 0,
      limit: 5,
    });
    for (const method of ["GET", "DELETE"]) {
      const byHash = await call(env, `/__floodgate/keys/origin/hash:${await hashIdentity("acme")}`, {
        method,
      });
      expect(byHash.status).toBe(400);
      expect(((await byHash.json()) as { detail: string }).detail).toMatch(/name it by its value/);
    }
    const unknown = await call(env, `/__floodgate/keys/origin/global`, { method: "DELETE" });
    expect(await unknown.json()).toMatchObject({ reset: false });
  });
});
