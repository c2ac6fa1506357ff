import { describe, expect, it } from "vitest";
import { baseEnv, fetchWorker, makeEnv, newTag, originPeak, send } from "./proxy-harness";

const anyRule = [{ name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 1000, period: "1m" }];

interface Echo {
  method: string;
  url: string;
  path: string;
  query: Record<string, string>;
  headers: Record<string, string>;
  bodyLength: number;
  bodyText?: string;
}

describe("proxying to ORIGIN_URL", () => {
  it("passes method, path, query, headers and body through, with X-Forwarded-* and the origin's Host", async () => {
    const env = makeEnv(anyRule);
    const sent = await send(env, "https://edge.example.com/api/items?x=1&y=%20z", {
      method: "POST",
      ip: "192.0.2.1",
      headers: { "content-type": "application/json", "x-custom": "kept", "X-Forwarded-For": "10.9.9.9" },
      body: JSON.stringify({ hello: "world" }),
    });
    expect(sent.status).toBe(200);
    const echo = sent.json<Echo>();
    expect(echo.method).toBe("POST");
    expect(echo.url).toBe("/api/items?x=1&y=%20z");
    expect(echo.bodyText).toBe('{"hello":"world"}');
    expect(echo.headers["x-custom"]).toBe("kept");
    expect(echo.headers.host).toBe(new URL(baseEnv.ORIGIN_URL).host);
    // The client's own X-Forwarded-For is not passed on as if the proxy vouched for it.
    expect(echo.headers["x-forwarded-for"]).toBe("192.0.2.1");
    expect(echo.headers["x-forwarded-proto"]).toBe("https");
    expect(echo.headers["x-forwarded-host"]).toBe("edge.example.com");
  });

  it("drops hop-by-hop headers, including those named in Connection", async () => {
    const env = makeEnv(anyRule);
    const sent = await send(env, "/hop", {
      ip: "192.0.2.2",
      headers: {
        Connection: "x-hop, keep-alive",
        "x-hop": "secret-to-this-hop",
        "Keep-Alive": "timeout=5",
        TE: "trailers",
        "x-end": "kept",
      },
    });
    const echo = sent.json<Echo>();
    expect(echo.headers["x-hop"]).toBeUndefined();
    expect(echo.headers.te).toBeUndefined();
    expect(echo.headers["keep-alive"]).toBeUndefined();
    expect(echo.headers["x-end"]).toBe("kept");
  });

  it("appends the request path to ORIGIN_URL's base path", async () => {
    const env = makeEnv(anyRule, { ORIGIN_URL: `${baseEnv.ORIGIN_URL}/base/` });
    const echo = (await send(env, "/v1/users?id=7", { ip: "192.0.2.3" })).json<Echo>();
    expect(echo.url).toBe("/base/v1/users?id=7");
  });

  it("only ever reaches ORIGIN_URL, whatever the Host, an absolute URL or a //host path say", async () => {
    const env = makeEnv(anyRule);
    for (const [url, host] of [
      ["http://evil.example/steal", "evil.example"],
      ["http://floodgate.test//evil.example/steal", "floodgate.test"],
      ["http://floodgate.test/@evil.example/steal", "evil.example:443"],
    ] as const) {
      const sent = await send(env, url, { ip: "192.0.2.4", headers: { Host: host } });
      expect(sent.status, url).toBe(200);
      const echo = sent.json<Echo>();
      expect(echo.headers.host, url).toBe(new URL(baseEnv.ORIGIN_URL).host);
      expect(echo.path.endsWith("/steal"), url).toBe(true);
    }
  });

  it("passes redirects back instead of following them", async () => {
    const sent = await send(makeEnv(anyRule), "/redirect", { ip: "192.0.2.5" });
    expect(sent.status).toBe(302);
    expect(sent.headers.get("Location")).toBe("/elsewhere");
  });

  it("streams the origin's body: the first chunk arrives before the origin has finished", async () => {
    const env = makeEnv(anyRule);
    const tag = newTag();
    // The origin writes "chunk 0", then the others 1 s apart, and counts the response in flight until its end.
    const { response, done } = fetchWorker(
      env,
      new Request("http://floodgate.test/stream?chunks=3&delayMs=1000", {
        headers: { "CF-Connecting-IP": "192.0.2.6", "x-count-tag": tag },
      }),
    );
    const reader = ((await response).body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    // Exactly the first chunk, not the body gathered first and handed over whole.
    expect(new TextDecoder().decode(first.value)).toBe("chunk 0\n");
    // While the test holds it, the origin is still answering that request: one more with the same tag is the
    // second in flight (a proxy that waited for the whole body would leave it the only one).
    await (await fetch(`${baseEnv.ORIGIN_URL}/`, { headers: { "x-count-tag": tag } })).arrayBuffer();
    expect(await originPeak(tag)).toBe(2);
    let rest = "";
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
      rest += new TextDecoder().decode(chunk.value);
    expect(rest).toBe("chunk 1\nchunk 2\n");
    await done();
  });

  it("answers 504 when the origin is slower than ORIGIN_TIMEOUT_MS, 502 when it is unreachable", async () => {
    const slow = await send(makeEnv(anyRule, { ORIGIN_TIMEOUT_MS: "300" }), "/slow?ms=2000", {
      ip: "192.0.2.7",
    });
    expect(slow.status).toBe(504);
    expect(slow.headers.get("Content-Type")).toBe("application/problem+json");
    expect(slow.json()).toMatchObject({ status: 504, title: "Gateway Timeout" });

    const down = await send(makeEnv(anyRule, { ORIGIN_URL: "http://127.0.0.1:9" }), "/", { ip: "192.0.2.8" });
    expect(down.status).toBe(502);
    expect(down.json()).toMatchObject({ status: 502, title: "Bad Gateway" });
    expect(down.text).not.toMatch(/at .*\.ts|Error:/);
  });

  it("bounds only the wait for headers: a body or a WebSocket goes on past ORIGIN_TIMEOUT_MS", async () => {
    // Unlimited (no decision: the origin wait has a timer of its own) and limited (it hangs on the decision's).
    const unlimited = [{ ...anyRule[0], name: "elsewhere", match: { path: "/limited/*" } }];
    for (const rules of [unlimited, anyRule]) {
      const env = makeEnv(rules, { ORIGIN_TIMEOUT_MS: "300" });
      const streamed = await send(env, "/stream?chunks=4&delayMs=250", { ip: "192.0.2.9" });
      expect(streamed.status).toBe(200);
      expect(streamed.text).toBe("chunk 0\nchunk 1\nchunk 2\nchunk 3\n");

      const call = fetchWorker(
        env,
        new Request("http://floodgate.test/ws/late?delayMs=700", {
          headers: { Upgrade: "websocket", Connection: "Upgrade", "CF-Connecting-IP": "192.0.2.9" },
        }),
      );
      const socket = (await call.response).webSocket as WebSocket;
      const message = new Promise<string>((resolve) =>
        socket.addEventListener("message", (event) => resolve(String(event.data))),
      );
      socket.accept();
      expect(await message).toBe("hello /ws/late?delayMs=700");
      socket.close();
      await call.done();
    }
  });

  it("never proxies the admin prefix and never rate-limits it", async () => {
    const env = makeEnv([{ name: "one", key: "ip", algorithm: "fixed-window", limit: 1, period: "1h" }]);
    for (const path of [
      "/__floodgate/health",
      "/__floodgate/health",
      "/__floodgate/anything",
      "/__floodgate",
    ]) {
      const sent = await send(env, path, { ip: "192.0.2.9" });
      expect(sent.status, path).not.toBe(429);
      expect(sent.text, path).not.toContain('"bodyLength"'); // never the echo origin's answer
    }
    // And the rule was never charged for them.
    expect((await send(env, "/", { ip: "192.0.2.9" })).status).toBe(200);
  });

  it("adds Server-Timing to proxied responses", async () => {
    const sent = await send(makeEnv(anyRule), "/", { ip: "192.0.2.10" });
    expect(sent.headers.get("Server-Timing")).toMatch(/ratelimit;dur=/);
  });
});
