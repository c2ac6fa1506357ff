// `settle` through the Hono middleware in a Node app: a handler's own JS ReadableStream (not a byte stream) and a
// fetched response's body both pass through unchanged, and the cost each states is what Redis counts.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Hono } from "hono";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { hashIdentity, stateKey } from "../../src/engine/keys";
import { rateLimit, type SettleEvent } from "../../src/middleware";

let direct: IORedis;
let upstream: Server;
let upstreamUrl: string;
const EVENTS = ['data: {"usage":null}\n\n', 'data: {"usage":{"total_tokens":77}}\n\n', "data: [DONE]\n\n"];

beforeAll(async () => {
  direct = new IORedis(inject("redisUrl"));
  upstream = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (const e of EVENTS) res.write(e);
    res.end();
  });
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/`;
});
afterAll(async () => {
  await new Promise((resolve) => upstream?.close(resolve));
  direct?.disconnect();
});

// The middleware's default budget is production's 200 ms: on a loaded machine a decision can take longer and
// fail open, counting nothing ("expected 0 to be 77"). These tests prove what is counted, not the fail-open path.
const BUDGET_MS = 5000;

/** The identity's count once it is `want`, or what it is when the deadline (the budget twice) passes. */
async function counted(prefix: string, who: string, want: number): Promise<number> {
  const key = stateKey(prefix, "tokens", await hashIdentity(who));
  const deadline = Date.now() + 2 * BUDGET_MS;
  let got = Number(await direct.get(key));
  while (got !== want && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 10));
    got = Number(await direct.get(key));
  }
  return got;
}

it("settles a handler's JS stream and a fetched stream, passing both through unchanged", async () => {
  const prefix = `settlemw${Date.now()}`;
  const app = new Hono();
  app.use(
    "*",
    rateLimit({
      redis: { url: inject("redisRestUrl"), token: inject("redisRestToken") },
      prefix,
      timeoutMs: BUDGET_MS,
      rules: [
        {
          name: "tokens",
          key: "header:x-client",
          algorithm: "fixed-window",
          limit: 10_000,
          period: "1h",
          settle: "sse:usage.total_tokens",
        },
      ],
    }),
  );
  app.get("/own", () => {
    const encoder = new TextEncoder();
    let i = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (i < EVENTS.length) controller.enqueue(encoder.encode(EVENTS[i++]));
        else controller.close();
      },
    });
    return new Response(body, { headers: { "content-type": "text/event-stream" } });
  });
  app.get("/fetched", () => fetch(upstreamUrl));

  for (const [path, who] of [
    ["/own", "client-own"],
    ["/fetched", "client-fetched"],
  ] as const) {
    const response = await app.request(path, { headers: { "x-client": who } });
    expect(response.status).toBe(200);
    expect(await response.text()).toBe(EVENTS.join(""));
    expect(await counted(prefix, who, 77)).toBe(77);
  }
});

it("tells onSettle what each rule was settled to, once Redis has answered", async () => {
  const prefix = `settlemw${Date.now()}b`;
  const told: SettleEvent[] = [];
  const app = new Hono();
  app.use(
    "*",
    rateLimit({
      redis: { url: inject("redisRestUrl"), token: inject("redisRestToken") },
      prefix,
      timeoutMs: BUDGET_MS,
      rules: [
        {
          name: "tokens",
          key: "header:x-client",
          algorithm: "fixed-window",
          limit: 10_000,
          period: "1h",
          cost: 5,
          settle: "sse:usage.total_tokens",
        },
      ],
      onSettle: (event) => void told.push(event),
    }),
  );
  app.get("/fetched", () => fetch(upstreamUrl));
  const response = await app.request("/fetched", { headers: { "x-client": "told" } });
  expect(await response.text()).toBe(EVENTS.join(""));
  expect(await counted(prefix, "told", 77)).toBe(77);
  const deadline = Date.now() + 2 * BUDGET_MS;
  while (told.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  expect(told).toHaveLength(1);
  expect(told[0]?.status).toBe(200);
  expect(told[0]?.rules.map(({ result, ...rest }) => ({ rule: result.call.rule, ...rest }))).toEqual([
    { rule: "tokens", outcome: "settled", reserved: 5, cost: 77, applied: 72, remaining: 10_000 - 77 },
  ]);
});
