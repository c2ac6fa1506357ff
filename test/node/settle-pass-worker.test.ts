// How a settled body passes through the Worker on workerd (src/middleware/settle.ts: two buffers in turn, written
// into a native pipe the client's response is pumped from; docs/settle.md): byte for byte over many chunks, a
// client that goes away keeps the reservation and the origin's body is cancelled, and a request that also holds
// a concurrency slot gets its whole stream and gives the slot back.
import { createHash } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { useWorkers, type Worker } from "../support/workers";

const RESERVED = 5;
const RULES = [
  {
    name: "tokens",
    match: { path: "/*" },
    key: "header:authorization",
    algorithm: "fixed-window",
    limit: 1e9,
    period: "1h",
    cost: RESERVED,
    settle: "sse:usage.total_tokens",
  },
  {
    name: "slot",
    match: { path: "/*" },
    key: "header:x-slot",
    missing: "skip",
    algorithm: "concurrency",
    limit: 1,
  },
];

const event = (usage: unknown) =>
  `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ delta: { content: " flood" } }], usage })}\n\n`;

/** The body `GET /fast?kb=n` answers: about n KiB of events, then one with the usage (`n` tokens + 1). */
function fastBody(kb: number): Buffer {
  const one = event(null);
  const count = Math.ceil((kb * 1024) / one.length);
  return Buffer.from(`${one.repeat(count)}${event({ total_tokens: kb + 1 })}data: [DONE]\n\n`);
}

/**
 * The test's origin: `GET /fast?kb=n` writes `fastBody(n)` in 16 KiB writes as fast as it is read; `GET /slow`
 * writes one event every 20 ms, 500 of them, and notes whether its response closed before its end.
 */
let origin: Server;
let originUrl = "";
const slow = { started: 0, cut: 0 };
const fleet = useWorkers({
  name: "settle-pass",
  count: 1,
  before: async () => {
    origin = createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://origin.test");
      res.writeHead(200, { "content-type": "text/event-stream" });
      if (url.pathname === "/fast") {
        const body = fastBody(Number(url.searchParams.get("kb")));
        for (let at = 0; at < body.length; at += 16 * 1024) res.write(body.subarray(at, at + 16 * 1024));
        res.end();
        return;
      }
      slow.started++;
      let sent = 0;
      const timer = setInterval(() => {
        if (sent++ < 500) res.write(event(null));
        else {
          clearInterval(timer);
          res.end(event({ total_tokens: 501 }));
        }
      }, 20);
      res.on("close", () => {
        if (!res.writableFinished) slow.cut++;
        clearInterval(timer);
      });
    });
    await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
    originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
  },
  after: async () => {
    await new Promise((resolve) => origin?.close(resolve));
  },
  bindings: () => ({ ORIGIN_URL: originUrl, RATE_LIMIT_RULES: RULES, RATE_LIMIT_TIMEOUT_MS: "5000" }),
});
const worker = fleet.handle(0);

/** The Redis key of the `tokens` rule's counter for an identity (the key layout of docs/scaling-out.md). */
async function counterOf(identity: string): Promise<number> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(identity));
  const hash = Buffer.from(new Uint8Array(digest, 0, 16)).toString("base64url");
  return Number((await fleet.direct.get(`${fleet.prefix}:tokens:{${hash}}`)) ?? 0);
}

/** Polls `read()` until it gives `want` or 5 s have passed; the last value read. */
async function until<T>(read: () => Promise<T>, want: T): Promise<T> {
  const deadline = Date.now() + 5000;
  let got = await read();
  while (got !== want && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 10));
    got = await read();
  }
  return got;
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

describe("a settled body through the Worker on workerd", () => {
  it("passes 2 MiB through byte for byte, however slowly the client reads, and settles its usage", async () => {
    for (const pause of [0, 2]) {
      const id = crypto.randomUUID();
      const response = await (worker as Worker).fetch("/fast?kb=2048", { headers: { authorization: id } });
      expect(response.status).toBe(200);
      const parts: Uint8Array[] = [];
      for await (const part of response.body as unknown as AsyncIterable<Uint8Array>) {
        parts.push(part);
        if (pause) await new Promise((r) => setTimeout(r, pause));
      }
      expect(sha256(Buffer.concat(parts)), `${pause} ms between reads`).toBe(sha256(fastBody(2048)));
      expect(await until(() => counterOf(id), 2049)).toBe(2049);
    }
  }, 30_000);

  it("keeps the reservation when the client goes away mid-stream, logs why, and cancels the origin's body", async () => {
    const id = crypto.randomUUID();
    const cutBefore = slow.cut;
    const controller = new AbortController();
    const response = await (worker as Worker).fetch("/slow", {
      headers: { authorization: id },
      signal: controller.signal,
    });
    expect(response.status).toBe(200);
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read(); // the stream has started
    controller.abort();
    await reader.cancel().catch(() => undefined);
    // The origin's 500 events would take 10 s: its body is cut long before.
    expect(await until(async () => slow.cut > cutBefore, true)).toBe(true);
    const logged = await until(
      async () =>
        (worker as Worker).logs.some((l) => l.includes(`rule "tokens"`) && l.includes("did not finish")),
      true,
    );
    expect(logged).toBe(true);
    expect(await counterOf(id)).toBe(RESERVED);
  }, 30_000);

  it("gives a request that also holds a concurrency slot its whole stream, then its slot back", async () => {
    const slot = crypto.randomUUID();
    for (let i = 0; i < 3; i++) {
      const id = crypto.randomUUID();
      // The slot goes back in the background once the body is written: the next request may have to wait for it.
      const deadline = Date.now() + 5000;
      let response = await (worker as Worker).fetch("/fast?kb=256", {
        headers: { authorization: id, "x-slot": slot },
      });
      while (response.status !== 200 && Date.now() < deadline) {
        await response.body?.cancel();
        await new Promise((r) => setTimeout(r, 20));
        response = await (worker as Worker).fetch("/fast?kb=256", {
          headers: { authorization: id, "x-slot": slot },
        });
      }
      expect(response.status, `request ${i}`).toBe(200);
      expect(sha256(new Uint8Array(await response.arrayBuffer()))).toBe(sha256(fastBody(256)));
      expect(await until(() => counterOf(id), 257)).toBe(257);
    }
  }, 30_000);
});
