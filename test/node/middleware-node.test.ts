// The Hono middleware in a Node app, where a request has no execution context: a hot identity is still
// decided from leases, renewed and returned in the background, and the count in Redis is exactly what was
// admitted once the leases are back. Also what a handler of a Node app returns or reads: a fetched response
// (immutable headers) and `c.get("rateLimit")`; and an async `onDecision` that fails, which must not take
// the process down.
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Hono } from "hono";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { hashIdentity, overrideKey, stateKey } from "../../src/engine/keys";
import { type RateLimitInfo, rateLimit } from "../../src/middleware";
import { awayFromWindowEdge } from "../support/window-edge";

let redis: Awaited<ReturnType<typeof startRedis>>;
let rest: Awaited<ReturnType<typeof startRestServer>>;
let direct: IORedis;
/** An upstream that answers with its own rate-limit and timing headers, as another rate-limited API would. */
let upstream: Server;
let upstreamUrl: string;

beforeAll(async () => {
  redis = await startRedis();
  rest = await startRestServer({ redisUrl: redis.url });
  direct = new IORedis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  direct.on("error", () => {});
  upstream = createServer((_req, res) => {
    res.setHeader("Server-Timing", "upstream;dur=7");
    res.setHeader("RateLimit", '"upstream";r=999;t=9');
    res.setHeader("X-RateLimit-Remaining", "999");
    res.setHeader("X-Upstream", "yes");
    res.end("from upstream");
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/`;
});

afterAll(async () => {
  await new Promise((resolve) => upstream?.close(resolve));
  direct?.disconnect();
  await rest?.close();
  await redis?.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const LEASE_MS = 300;

it("decides a hot identity from leases off Workers, and gives back what a lease did not spend", async () => {
  const prefix = `mwnode${Date.now()}`;
  const app = new Hono();
  app.use(
    "*",
    rateLimit({
      redis: { url: rest.url, token: rest.token },
      prefix,
      leaseMs: LEASE_MS,
      // A decision over the default 200 ms budget (a loaded CI box) would be admitted by the fallback limiter,
      // which Redis never counts: this test is about leases and their returns.
      timeoutMs: 2_000,
      rules: [
        { name: "api", key: "header:x-client", algorithm: "fixed-window", limit: 10_000, period: "1h" },
      ],
    }),
  );
  app.get("*", (c) => c.text("ok"));
  const send = async (client: string) => {
    const response = await app.request("/hello", { headers: { "x-client": client } });
    await response.arrayBuffer();
    return { status: response.status, timing: response.headers.get("Server-Timing") ?? "" };
  };

  await awayFromWindowEdge(3_600_000, 10_000); // the returns below must land in the same hour
  let admitted = 0;
  let local = 0;
  for (let i = 0; i < 300; i++) {
    const { status, timing } = await send("hot");
    if (status === 200) admitted++;
    if (timing.includes('desc="lease"')) local++;
  }
  expect(admitted).toBe(300);
  expect(local).toBeGreaterThan(admitted / 2);

  // Every lease expires; the next request (anyone's) sends back what is left, in the background.
  await sleep(LEASE_MS + 200);
  expect((await send("someone-else")).status).toBe(200);
  const key = stateKey(prefix, "api", await hashIdentity("hot"));
  let counted = Number(await direct.get(key));
  for (let i = 0; i < 60 && counted !== admitted; i++) {
    await sleep(50);
    counted = Number(await direct.get(key));
  }
  expect(counted).toBe(admitted);
});

describe("a handler that returns a fetched response", () => {
  // With a concurrency rule the response is also wrapped to give its slot back once written.
  it.each([
    ["a window rule", [{ name: "api", key: "global", algorithm: "fixed-window", limit: 5, period: "1h" }]],
    ["a concurrency rule", [{ name: "api", key: "global", algorithm: "concurrency", limit: 5 }]],
  ] as const)("answers with our rate-limit headers over the upstream's own (%s)", async (_, rules) => {
    const app = new Hono();
    app.use(
      rateLimit({
        redis: { url: rest.url, token: rest.token },
        prefix: `mwnode${randomUUID()}`,
        rules: [...rules],
      }),
    );
    app.get("/", () => fetch(upstreamUrl)); // a fetched response's headers are immutable
    const response = await app.request("/");
    expect(await response.text()).toBe("from upstream");
    expect(response.headers.get("RateLimit")).toMatch(/^"api";r=4(;t=\d+)?$/);
    expect(response.headers.get("X-RateLimit-Remaining")).toBe("4");
    expect(response.headers.get("Server-Timing")).toMatch(/^upstream;dur=7, ratelimit;dur=[\d.]+$/);
    expect(response.headers.get("X-Upstream")).toBe("yes");
  });
});

it("shows on c.var the rule the X-RateLimit-* headers describe, never a shed rule's origin budget", async () => {
  const app = new Hono();
  app.use(
    rateLimit({
      redis: { url: rest.url, token: rest.token },
      prefix: `mwnode${randomUUID()}`,
      rules: [
        { name: "quota", key: "global", algorithm: "fixed-window", limit: 100, period: "1h" },
        // 1 of 2 slots left once this request holds one: fewer than the quota's 99, but not the client's quota.
        {
          name: "origin",
          key: "global",
          algorithm: "shed",
          limit: 2,
          shards: 1,
          priority: "method",
          priorities: { GET: 1 },
        },
      ],
    }),
  );
  app.get("/", (c) => c.json(c.get("rateLimit") ?? null));
  const response = await app.request("/");
  const info = (await response.json()) as RateLimitInfo;
  expect(response.headers.get("X-RateLimit-Remaining")).toBe("99");
  expect(info).toMatchObject({ policy: "quota", limit: 100, remaining: 99, source: "redis" });
  expect(info.rules.map((r) => r.call.rule)).toEqual(["quota", "origin"]);
});

it("survives an async onDecision that rejects: no unhandled rejection, and the app keeps answering", async () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  process.on("unhandledRejection", onUnhandled);
  try {
    let observed = 0;
    const app = new Hono();
    app.use(
      rateLimit({
        redis: { url: rest.url, token: rest.token },
        prefix: `mwnode${randomUUID()}`,
        rules: [{ name: "api", key: "global", algorithm: "fixed-window", limit: 100, period: "1h" }],
        // An analytics call that fails, as a `fetch` to a collector that is down does.
        onDecision: async () => {
          observed++;
          await sleep(1);
          throw new Error("analytics collector is down");
        },
      }),
    );
    app.get("/", (c) => c.text("ok"));
    for (let i = 0; i < 3; i++) {
      const response = await app.request("/");
      expect(await response.text()).toBe("ok");
    }
    await sleep(50); // Node reports an unhandled rejection once the microtasks after it have run
    expect(observed).toBe(3);
    expect(unhandled).toEqual([]);
  } finally {
    process.off("unhandledRejection", onUnhandled);
  }
});

it("answers a bucket's repeated 429 from memory while reading overrides, unless an override set its limits", async () => {
  const prefix = `mwnode${randomUUID()}`;
  const app = new Hono();
  app.use(
    rateLimit({
      redis: { url: rest.url, token: rest.token },
      prefix,
      overrides: true, // every decision reads the identity's override: the isolate cannot know who has one
      rules: [{ name: "tb", key: "header:x-client", algorithm: "token-bucket", limit: 1, period: "1h" }],
    }),
  );
  app.get("/", (c) => c.text("ok"));
  /** Three requests from `client`: how each was answered ("deny_cache" = from the isolate's memory). */
  const three = async (client: string) => {
    const answers: string[] = [];
    for (let i = 0; i < 3; i++) {
      const response = await app.request("/", { headers: { "x-client": client } });
      await response.arrayBuffer();
      const by = /desc="(\w+)"/.exec(response.headers.get("Server-Timing") ?? "")?.[1] ?? "redis";
      answers.push(`${response.status} ${by}`);
    }
    return answers;
  };
  expect(await three("plain")).toEqual(["200 redis", "429 redis", "429 deny_cache"]);

  // An override with the rule's very own figures, which its ttl ends: its denial is never answered from memory.
  const key = overrideKey(prefix, "tb", await hashIdentity("vip"));
  await direct.hset(key, { limit: 1, burst: 1 });
  await direct.pexpire(key, 60_000);
  expect(await three("vip")).toEqual(["200 redis", "429 redis", "429 redis"]);
});
