import { describe, expect, it } from "vitest";
import { fetchWorker, makeEnv, send } from "./proxy-harness";

const inFlight = (limit: number) => ({
  name: "in-flight",
  key: "ip",
  algorithm: "concurrency",
  limit,
  period: "60s",
});
const streamRequest = (ip: string) =>
  new Request("http://floodgate.test/stream?chunks=2&delayMs=300", { headers: { "CF-Connecting-IP": ip } });

async function drain(response: Response) {
  await response.text();
}

describe("concurrency slots", () => {
  it("holds a slot until the body is fully written, then gives it back", async () => {
    const env = makeEnv([inFlight(2)]);
    const first = fetchWorker(env, streamRequest("192.0.2.1"));
    const second = fetchWorker(env, streamRequest("192.0.2.1"));
    const [a, b] = await Promise.all([first.response, second.response]);
    expect([a.status, b.status]).toEqual([200, 200]);

    // Both bodies are still streaming: a third request finds no free slot.
    const third = await send(env, "/", { ip: "192.0.2.1" });
    expect(third.status).toBe(429);
    expect(third.headers.get("Retry-After")).toBe("1");
    expect(third.json()["violated-policies"]).toEqual(["in-flight"]);

    await Promise.all([drain(a), drain(b)]);
    await Promise.all([first.done(), second.done()]);
    expect((await send(env, "/", { ip: "192.0.2.1" })).status).toBe(200);
  });

  it("gives the slot back when the client goes away mid-body", async () => {
    const env = makeEnv([inFlight(1)]);
    const call = fetchWorker(
      env,
      new Request("http://floodgate.test/stream?chunks=5&delayMs=300", {
        headers: { "CF-Connecting-IP": "192.0.2.2" },
      }),
    );
    const response = await call.response;
    const reader = (response.body as ReadableStream).getReader();
    await reader.read();
    await reader.cancel();
    await call.done();
    expect((await send(env, "/", { ip: "192.0.2.2" })).status).toBe(200);
  });

  it("gives the slot back at once for bodiless responses and origin failures", async () => {
    const env = makeEnv([inFlight(1)]);
    for (let i = 0; i < 3; i++)
      expect((await send(env, "/status/204", { ip: "192.0.2.3" })).status).toBe(204);
    const down = makeEnv([inFlight(1)], { ORIGIN_URL: "http://127.0.0.1:9" });
    for (let i = 0; i < 3; i++) expect((await send(down, "/", { ip: "192.0.2.3" })).status).toBe(502);
  });
});

describe("when Redis cannot answer", () => {
  const unreachable = { UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9", RATE_LIMIT_TIMEOUT_MS: "100" };
  const rule = { name: "guarded", key: "ip", algorithm: "fixed-window", limit: 5, period: "1m" };

  it("failure closed: 503 temporary-reduced-capacity with Retry-After and no-store", async () => {
    const env = makeEnv([{ ...rule, failure: "closed" }], unreachable);
    const sent = await send(env, "/", { ip: "192.0.2.4" });
    expect(sent.status).toBe(503);
    expect(sent.headers.get("Cache-Control")).toBe("no-store");
    expect(Number(sent.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
    expect(sent.json()).toMatchObject({
      type: "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
      status: 503,
      retry_after: Number(sent.headers.get("Retry-After")),
    });
  });

  it("failure open: proxies, without RateLimit members for the rule it could not decide", async () => {
    const env = makeEnv([rule], unreachable);
    const sent = await send(env, "/", { ip: "192.0.2.5" });
    expect(sent.status).toBe(200);
    expect(sent.headers.get("RateLimit")).toBeNull();
    expect(sent.headers.get("RateLimit-Policy")).toBeNull();
    expect(sent.headers.get("Server-Timing")).toMatch(/ratelimit;dur=[\d.]+;desc="\w+"/);
  });

  it("a monitor rule that fails closed never causes a 503", async () => {
    const env = makeEnv([{ ...rule, failure: "closed", mode: "monitor" }], unreachable);
    expect((await send(env, "/", { ip: "192.0.2.6" })).status).toBe(200);
  });
});

describe("WebSockets", () => {
  it("pass through the proxy", async () => {
    const env = makeEnv([{ name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 10, period: "1m" }]);
    const call = fetchWorker(
      env,
      new Request("http://floodgate.test/ws/chat", {
        headers: { Upgrade: "websocket", Connection: "Upgrade", "CF-Connecting-IP": "192.0.2.7" },
      }),
    );
    const response = await call.response;
    expect(response.status).toBe(101);
    const socket = response.webSocket as WebSocket;
    const message = new Promise<string>((resolve) =>
      socket.addEventListener("message", (event) => resolve(String(event.data))),
    );
    socket.accept();
    expect(await message).toBe("hello /ws/chat");
    socket.close();
  });
});
