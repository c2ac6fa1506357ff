import { describe, expect, it } from "vitest";
import { hashIdentity, overrideKey, stateKey } from "../../src/engine/keys";
import { awayFromWindowEdge } from "../support/window-edge";
import { call, makeEnv, redis, send, uniquePrefix } from "./admin-harness";

const RULES = [
  { name: "api", key: "header:x-api-key", algorithm: "token-bucket", limit: 10, period: "1m", burst: 5 },
  { name: "by-net", key: "ip/64", algorithm: "fixed-window", limit: 10, period: "1m" },
  { name: "many", key: "header:x-api-key", algorithm: "fixed-window", limit: 10, period: "1m" },
  { name: "log", key: "header:x-api-key", algorithm: "sliding-log", limit: 10, period: "1m" },
  {
    name: "origin",
    key: "global",
    algorithm: "shed",
    limit: 10,
    priority: "method",
    priorities: { GET: 0.5 },
  },
];
/** Each test its own prefix: no override one test stores is seen by another (or by a rerun in watch mode). */
function fresh() {
  const prefix = uniquePrefix("admin-ovr");
  return { prefix, testEnv: makeEnv(prefix, RULES) };
}

interface ShownOverride {
  rule: string;
  identity: string;
  limit: number;
  period: string | null;
  burst: number;
  ttl: number | null;
}

describe("overrides", () => {
  it("refuses an override of a shed rule, whose limits are its classes' shares, and stores nothing", async () => {
    const { prefix, testEnv } = fresh();
    const put = await send(testEnv, "PUT", "/__floodgate/overrides/origin/global", { limit: 1000 });
    expect(put.status).toBe(400);
    expect(((await put.json()) as { detail: string }).detail).toMatch(/sheds load; overrides do not apply/);
    expect(await redis.exists(overrideKey(prefix, "origin", await hashIdentity("global")))).toBe(0);
  });

  it("refuses a sliding-log override letting more requests into one window than the log's cap, naming the limit", async () => {
    const { prefix, testEnv } = fresh();
    const put = await send(testEnv, "PUT", "/__floodgate/overrides/log/key-erin", { limit: 1_000_000 });
    expect(put.status).toBe(400);
    expect(((await put.json()) as { detail: string }).detail).toMatch(
      /^limit: 1000000 lets up to 1000000 requests of 1 unit into one window, more than 10000/,
    );
    expect(await redis.exists(overrideKey(prefix, "log", await hashIdentity("key-erin")))).toBe(0);
    const fits = await send(testEnv, "PUT", "/__floodgate/overrides/log/key-erin", { limit: 10_000 });
    expect(fits.status).toBe(200);
  });

  it("sets, reads and removes one client's override, stored under the proxy's hash of its key", async () => {
    const { prefix, testEnv } = fresh();
    const put = await send(testEnv, "PUT", "/__floodgate/overrides/api/key-alice", {
      limit: 1000,
      period: "1h",
      burst: 200,
    });
    expect(put.status).toBe(200);
    const hash = await hashIdentity("key-alice");
    const shown = {
      rule: "api",
      identity: `hash:${hash}`,
      limit: 1000,
      period: "1h",
      burst: 200,
      ttl: null,
    };
    expect(await put.json()).toEqual(shown);

    // Exactly the fields the decision script reads, period in ms, and no expiry.
    const key = overrideKey(prefix, "api", hash);
    expect(await redis.hgetall(key)).toEqual({ limit: 1000, period: 3_600_000, burst: 200 });
    expect(await redis.ttl(key)).toBe(-1);

    const got = await call(testEnv, "/__floodgate/overrides/api/key-alice");
    expect(got.status).toBe(200);
    expect(await got.json()).toEqual(shown);
    // The hashed form names the same override.
    expect(await (await call(testEnv, `/__floodgate/overrides/api/hash:${hash}`)).json()).toEqual(shown);

    expect((await call(testEnv, "/__floodgate/overrides/api/key-alice", { method: "DELETE" })).status).toBe(
      204,
    );
    expect(await redis.exists(key)).toBe(0);
    expect((await call(testEnv, "/__floodgate/overrides/api/key-alice")).status).toBe(404);
    expect((await call(testEnv, "/__floodgate/overrides/api/key-alice", { method: "DELETE" })).status).toBe(
      404,
    );
  });

  it("defaults burst to the override's limit and period to the rule's own", async () => {
    const { prefix, testEnv } = fresh();
    const put = await send(testEnv, "PUT", "/__floodgate/overrides/api/key-bob", { limit: 42 });
    expect(await put.json()).toMatchObject({ limit: 42, burst: 42, period: null, ttl: null });
    const hash = await hashIdentity("key-bob");
    expect(await redis.hgetall(overrideKey(prefix, "api", hash))).toEqual({ limit: 42, burst: 42 });
  });

  it("replaces the whole override on PUT, and a ttl makes it expire on its own", async () => {
    const { prefix, testEnv } = fresh();
    await send(testEnv, "PUT", "/__floodgate/overrides/api/key-carol", {
      limit: 5,
      period: 30,
      burst: 9,
      ttl: 3600,
    });
    const key = overrideKey(prefix, "api", await hashIdentity("key-carol"));
    expect(await redis.ttl(key)).toBeGreaterThan(3590);
    const replaced = await send(testEnv, "PUT", "/__floodgate/overrides/api/key-carol", { limit: 7 });
    expect(await replaced.json()).toMatchObject({ limit: 7, burst: 7, period: null, ttl: null });
    expect(await redis.hgetall(key)).toEqual({ limit: 7, burst: 7 });
    expect(await redis.ttl(key)).toBe(-1);
  });

  it("accepts an ip/64 prefix with its slash, raw or percent-encoded, and composite identities decoded once", async () => {
    const { testEnv } = fresh();
    await send(testEnv, "PUT", "/__floodgate/overrides/by-net/2001:db8:1:2::/64", { limit: 3 });
    const encoded = await call(testEnv, "/__floodgate/overrides/by-net/2001%3Adb8%3A1%3A2%3A%3A%2F64");
    expect(await encoded.json()).toMatchObject({
      identity: `hash:${await hashIdentity("2001:db8:1:2::/64")}`,
    });

    // A composite part containing `|` is percent-encoded by the proxy (a%7Cb); in a URL that is a%257Cb.
    const put = await send(testEnv, "PUT", "/__floodgate/overrides/api/a%257Cb%7Cc", { limit: 4 });
    expect(await put.json()).toMatchObject({ identity: `hash:${await hashIdentity("a%7Cb|c")}` });
  });

  it("rejects malformed bodies with 400 problem+json naming the field", async () => {
    const { testEnv } = fresh();
    const cases: Array<[unknown, string]> = [
      ["not json", "JSON"],
      [{}, "limit"],
      [{ limit: "ten" }, "limit"],
      [{ limit: 0 }, "limit"],
      [{ limit: 1.5 }, "limit"],
      [{ limit: 10, period: "1 fortnight" }, "period"],
      [{ limit: 10, period: "0s" }, "period"],
      [{ limit: 10, burst: -1 }, "burst"],
      [{ limit: 10, ttl: "1h" }, "ttl"],
      [{ limit: 10, colour: "red" }, "colour"],
    ];
    for (const [body, field] of cases) {
      const response = await send(testEnv, "PUT", "/__floodgate/overrides/api/key-dave", body);
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(response.headers.get("Content-Type")).toBe("application/problem+json");
      expect(((await response.json()) as { detail: string }).detail).toContain(field);
    }
    expect((await call(testEnv, "/__floodgate/overrides/api/key-dave")).status).toBe(404);
  });

  it("answers 404 for an unknown rule and 400 for a malformed hash", async () => {
    const { testEnv } = fresh();
    expect((await send(testEnv, "PUT", "/__floodgate/overrides/nope/key", { limit: 1 })).status).toBe(404);
    expect((await call(testEnv, "/__floodgate/overrides/nope/key")).status).toBe(404);
    expect((await call(testEnv, "/__floodgate/overrides/nope")).status).toBe(404);
    expect((await call(testEnv, "/__floodgate/overrides/api/hash:short")).status).toBe(400);
  });

  it("answers 401 on every override endpoint without the right token", async () => {
    const { testEnv } = fresh();
    for (const token of [null, "wrong"]) {
      for (const [method, path] of <Array<[string, string]>>[
        ["PUT", "/__floodgate/overrides/api/key-x"],
        ["GET", "/__floodgate/overrides/api/key-x"],
        ["DELETE", "/__floodgate/overrides/api/key-x"],
        ["GET", "/__floodgate/overrides/api"],
      ]) {
        const response = await call(testEnv, path, {
          method,
          token,
          body: method === "PUT" ? "{}" : undefined,
        });
        expect(response.status, `${method} ${path}`).toBe(401);
      }
    }
  });

  it("lists 1,000 overrides of a rule page by page, each exactly once, never more than the page size", async () => {
    const { prefix, testEnv } = fresh();
    const hashes = await Promise.all(Array.from({ length: 1000 }, (_, i) => hashIdentity(`client-${i}`)));
    const pipeline = redis.pipeline();
    for (const hash of hashes) pipeline.hset(overrideKey(prefix, "many", hash), { limit: 50, burst: 50 });
    await pipeline.exec();

    const seen: string[] = [];
    let cursor: string | null = "0";
    let pages = 0;
    while (cursor !== null) {
      const response = await call(testEnv, `/__floodgate/overrides/many?limit=100&cursor=${cursor}`);
      expect(response.status).toBe(200);
      const page = (await response.json()) as { overrides: ShownOverride[]; next_cursor: string | null };
      expect(page.overrides.length).toBeLessThanOrEqual(100);
      for (const item of page.overrides) expect(item).toMatchObject({ limit: 50, burst: 50, ttl: null });
      seen.push(...page.overrides.map((o) => o.identity));
      cursor = page.next_cursor;
      pages++;
      expect(pages).toBeLessThan(200);
    }
    expect(seen.length).toBe(1000);
    expect(new Set(seen)).toEqual(new Set(hashes.map((h) => `hash:${h}`)));
    expect(pages).toBeGreaterThanOrEqual(10);
  });

  it("loses no override while other keys come and go between pages (Redis rehashing its keyspace)", async () => {
    const rule = "many";
    const { prefix, testEnv: env } = fresh();
    const hashes = await Promise.all(Array.from({ length: 300 }, (_, i) => hashIdentity(`churn-${i}`)));
    const fill = redis.pipeline();
    for (const hash of hashes) fill.hset(overrideKey(prefix, rule, hash), { limit: 5 });
    await fill.exec();

    const seen: string[] = [];
    let cursor: string | null = "0";
    for (let page = 0; cursor !== null && page < 200; page++) {
      const response = await call(env, `/__floodgate/overrides/${rule}?limit=7&cursor=${cursor}`);
      const body = (await response.json()) as { overrides: ShownOverride[]; next_cursor: string | null };
      seen.push(...body.overrides.map((o) => o.identity));
      cursor = body.next_cursor;
      // Other tenants' keys appear and vanish between two pages, so the keyspace grows and rehashes.
      const churn = redis.pipeline();
      for (let i = 0; i < 400; i++) churn.set(`${prefix}-junk:${page}:${i}`, "x", { px: 300 });
      await churn.exec();
    }
    expect(cursor).toBeNull();
    expect(new Set(seen)).toEqual(new Set(hashes.map((h) => `hash:${h}`)));
  });

  it("rejects a page size or cursor it cannot use", async () => {
    const { testEnv } = fresh();
    expect((await call(testEnv, "/__floodgate/overrides/many?limit=0")).status).toBe(400);
    expect((await call(testEnv, "/__floodgate/overrides/many?limit=5000")).status).toBe(400);
    expect((await call(testEnv, "/__floodgate/overrides/many?cursor=abc")).status).toBe(400);
  });

  it("answers a cursor it never handed out with 400 naming `cursor`, not a Redis error", async () => {
    const { testEnv } = fresh();
    // One database here: `<endpoint>-<cursor>` is only ever handed out with several; SCAN cursors are 64-bit.
    for (const cursor of ["0-0", "1-1536", "99999999999999999999"]) {
      const response = await call(testEnv, `/__floodgate/overrides/many?cursor=${cursor}`);
      expect(response.status).toBe(400);
      expect(response.headers.get("Content-Type")).toBe("application/problem+json");
      expect(((await response.json()) as { detail: string }).detail).toMatch(/^cursor: /);
    }
  });
});

describe("an override with a period of its own", () => {
  const HOUR_MS = 3_600_000;
  const rules = [{ name: "fw", key: "ip", algorithm: "fixed-window", limit: 3, period: "10s" }];

  /** A proxied request from `ip`, its body read. */
  async function request(testEnv: Record<string, unknown>, ip: string) {
    const response = await call(testEnv, "/fw/o", { ip });
    await response.text();
    return response;
  }

  it("is the window RateLimit-Policy advertises (w), on every response, leased ones too", async () => {
    const testEnv = makeEnv(uniquePrefix("ovr-window"), rules);
    const ip = "198.51.100.60";
    await awayFromWindowEdge(HOUR_MS, 20_000);
    await send(testEnv, "PUT", `/__floodgate/overrides/fw/${ip}`, { limit: 100, period: "1h" });
    // Quick requests of one identity: after the first ones, leases decide them locally.
    let leased = 0;
    for (let i = 0; i < 20; i++) {
      const response = await request(testEnv, ip);
      expect(response.status).toBe(200);
      expect(response.headers.get("RateLimit-Policy")).toBe('"fw";q=100;w=3600');
      const t = Number(/;t=(\d+)/.exec(response.headers.get("RateLimit") ?? "")?.[1]);
      expect(t).toBeGreaterThan(10);
      expect(t).toBeLessThanOrEqual(3600);
      if (response.headers.get("Server-Timing")?.includes('desc="lease"')) leased++;
    }
    expect(leased).toBeGreaterThan(0);
    await call(testEnv, `/__floodgate/overrides/fw/${ip}`, { method: "DELETE" });
    expect((await request(testEnv, ip)).headers.get("RateLimit-Policy")).toBe('"fw";q=3;w=10');
  });

  it("leaves no counter on the other window once set or removed: t is honest after the removal", async () => {
    // Leases off: every request counts exactly one unit in Redis.
    const prefix = uniquePrefix("ovr-reaim");
    const testEnv = makeEnv(prefix, rules, { RATE_LIMIT_LEASES: "off" });
    const ip = "198.51.100.61";
    const counter = stateKey(prefix, "fw", await hashIdentity(ip));
    // One 10 s window for the whole test, and not the last of an hour (whose end is also the hour's).
    await awayFromWindowEdge(HOUR_MS, 20_000);
    await awayFromWindowEdge(10_000, 6_000);

    expect((await request(testEnv, ip)).status).toBe(200);
    expect(await redis.pttl(counter)).toBeLessThanOrEqual(10_000);
    // A longer window set while the rule's counter is live: the count moves to the hour, not lost in 10 s.
    await send(testEnv, "PUT", `/__floodgate/overrides/fw/${ip}`, { limit: 6, period: "1h" });
    expect(await redis.pttl(counter)).toBeGreaterThan(10_000);
    expect((await request(testEnv, ip)).headers.get("RateLimit")).toMatch(/^"fw";r=4;t=\d+$/);

    // Removed: the counter ends with the rule's window, and the next requests are decided without the override.
    expect((await call(testEnv, `/__floodgate/overrides/fw/${ip}`, { method: "DELETE" })).status).toBe(204);
    expect(await redis.pttl(counter)).toBeLessThanOrEqual(10_000);
    const last = await request(testEnv, ip);
    expect(last.status).toBe(200);
    const promised = /^"fw";r=0;t=(\d+)$/.exec(last.headers.get("RateLimit") ?? "");
    expect(promised, String(last.headers.get("RateLimit"))).not.toBeNull();
    const denied = await request(testEnv, ip);
    expect(denied.status).toBe(429);
    // Quota is back when the allowed response said it would be, not when the hour's window ends.
    expect(Number(denied.headers.get("Retry-After"))).toBeLessThanOrEqual(Number(promised?.[1]));
  });
});
