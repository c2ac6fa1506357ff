// The local REST server speaks Upstash's protocol: checked with the real @upstash/redis client in each of
// its wire modes, and with raw HTTP where the exact wire shape matters. A private Redis (not the run's
// shared one) because these tests flush the script cache.
import { createHash } from "node:crypto";
import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type RedisHandle, type RestServer, startRedis, startRestServer } from "../../redis-rest/index.mjs";

let redis: RedisHandle;
let rest: RestServer;
beforeAll(async () => {
  redis = await startRedis();
  rest = await startRestServer({ redisUrl: redis.url, maxBodyBytes: 1024 * 1024 });
});
afterAll(async () => {
  await rest?.close();
  await redis?.close();
});

const sha1 = (text: string) => createHash("sha1").update(text).digest("hex");
const FLAGGED = "#!lua flags=allow-key-locking\nreturn {KEYS[1], ARGV[1], tonumber(ARGV[2]) * 2}";

/** A raw request to the REST server; `auth: false` sends no token. */
async function raw(path: string, init: RequestInit & { auth?: boolean } = {}) {
  const headers = new Headers(init.headers);
  if (init.auth !== false) headers.set("authorization", `Bearer ${rest.token}`);
  const res = await fetch(`${rest.url}${path}`, { ...init, headers });
  return {
    status: res.status,
    headers: res.headers,
    body: (await res.json()) as { result?: unknown; error?: string },
  };
}
const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  raw(path, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json", ...headers },
  });

const modes = [
  { autoPipelining: true, encoding: "base64" },
  { autoPipelining: true, encoding: false },
  { autoPipelining: false, encoding: "base64" },
  { autoPipelining: false, encoding: false },
] as const;

describe.each(modes)("@upstash/redis (auto-pipelining $autoPipelining, encoding $encoding)", (mode) => {
  const prefix = `t:${mode.autoPipelining}:${mode.encoding}:`;
  const client = (token = rest.token) =>
    new Redis({
      url: rest.url,
      token,
      enableAutoPipelining: mode.autoPipelining,
      responseEncoding: mode.encoding,
      automaticDeserialization: false,
      enableTelemetry: false,
      retry: { retries: 0 },
    });

  it("round-trips unicode, control characters and strings that look like base64 or OK", async () => {
    const c = client();
    const values = [
      "héllo ✓ 𝄞 日本",
      "\u0000\u0001\u007f\u0080\u00ff\ufffd",
      "T0s=",
      "OK",
      "",
      "x".repeat(100_000),
    ];
    await Promise.all(values.map((v, i) => c.set(`${prefix}s${i}`, v)));
    const back = await Promise.all(values.map((_, i) => c.get(`${prefix}s${i}`)));
    expect(back).toEqual(values);
  });

  it("answers integers as numbers and a missing key as null", async () => {
    const c = client();
    expect(await c.incrby(`${prefix}n`, 41)).toBe(41);
    expect(await c.incr(`${prefix}n`)).toBe(42);
    expect(await c.get(`${prefix}missing`)).toBeNull();
  });

  it("returns nested arrays from EVAL, cut at the first nil as Redis does", async () => {
    const c = client();
    const script = "return {1, 'a', {2, 'b', {'OK'}}, redis.status_reply('OK'), 3.7, nil, 9}";
    expect(await c.eval(script, [], [])).toEqual([1, "a", [2, "b", ["OK"]], "OK", 3]);
  });

  it("reports Redis errors with their text", async () => {
    const c = client();
    await c.set(`${prefix}str`, "abc");
    await expect(c.incr(`${prefix}str`)).rejects.toThrow(/ERR value is not an integer/);
    await expect(c.eval("return redis.error_reply('MYERR custom')", [], [])).rejects.toThrow(/MYERR custom/);
  });

  it("reads a hash back with HGETALL, and a missing hash as null", async () => {
    const c = client();
    await c.hset(`${prefix}h`, { limit: "ten", ünï: "v" });
    expect(await c.hgetall(`${prefix}h`)).toEqual(["limit", "ten", "ünï", "v"]); // flat without deserialization
    const deserializing = new Redis({ url: rest.url, token: rest.token, responseEncoding: mode.encoding });
    expect(await deserializing.hgetall(`${prefix}h`)).toEqual({ limit: "ten", ünï: "v" });
    expect(await deserializing.hgetall(`${prefix}nohash`)).toBeNull();
  });

  it("runs a pipeline in order, with per-command errors", async () => {
    const c = client();
    const p = c.pipeline();
    p.set(`${prefix}p`, "v").get(`${prefix}p`).incr(`${prefix}p`).del(`${prefix}p`);
    const results = await p.exec({ keepErrors: true });
    expect(results.map((r) => r.result)).toEqual(["OK", "v", undefined, 1]);
    expect(results[2]?.error).toMatch(/not an integer/);
  });

  it("runs transactions atomically under concurrency", async () => {
    const c = client();
    const key = `${prefix}tx`;
    // Each transaction increments twice; if two ever interleaved, some transaction would see a gap.
    const runs = await Promise.all(
      Array.from({ length: 40 }, () => c.multi().incr(key).incr(key).exec<[number, number]>()),
    );
    for (const [first, second] of runs) expect(second).toBe(first + 1);
    expect(new Set(runs.map(([first]) => first)).size).toBe(40);
  });

  it("loads a script by SHA, reports NOSCRIPT after SCRIPT FLUSH, and a Script object recovers", async () => {
    const c = client();
    const body = `return '${prefix}' .. ARGV[1]`;
    expect(await c.scriptLoad(body)).toBe(sha1(body));
    expect(await c.evalsha(sha1(body), [], ["x"])).toBe(`${prefix}x`);
    await c.scriptFlush();
    await expect(c.evalsha(sha1(body), [], ["x"])).rejects.toThrow(/NOSCRIPT No matching script/);
    expect(await c.createScript(body).exec([], ["y"])).toBe(`${prefix}y`);
    expect(await c.evalsha(sha1(body), [], ["z"])).toBe(`${prefix}z`);
  });

  it("runs a script flagged for Upstash key locking, under the SHA of its original body", async () => {
    const c = client();
    await c.scriptFlush();
    const script = c.createScript<[string, string, number]>(FLAGGED);
    expect(await script.exec([`${prefix}k`], ["a", "21"])).toEqual([`${prefix}k`, "a", 42]);
    expect(await c.scriptExists(sha1(FLAGGED))).toEqual([1]);
    expect(await c.scriptLoad(FLAGGED)).toBe(sha1(FLAGGED));
    expect(await c.evalsha(sha1(FLAGGED), [`${prefix}k`], ["b", "1"])).toEqual([`${prefix}k`, "b", 2]);
    await c.scriptFlush();
    await expect(c.evalsha(sha1(FLAGGED), ["k"], ["b", "1"])).rejects.toThrow(/NOSCRIPT/);
    expect(await c.scriptExists(sha1(FLAGGED))).toEqual([0]);
    expect(await script.exec([`${prefix}k`], ["c", "2"])).toEqual([`${prefix}k`, "c", 4]);
  });

  it("refuses a wrong token", async () => {
    await expect(client("wrong").get(`${prefix}x`)).rejects.toThrow(/Unauthorized/);
  });
});

describe("the wire, byte for byte", () => {
  it("base64-encodes strings but not a top-level OK, nor integers, nil or errors", async () => {
    const b64 = { "upstash-encoding": "base64" };
    expect((await post("/", ["SET", "w:k", "bar"], b64)).body).toEqual({ result: "OK" });
    expect((await post("/", ["GET", "w:k"], b64)).body).toEqual({ result: "YmFy" });
    const eval_ = await post("/", ["EVAL", "return {redis.status_reply('OK'), 'OK', 7}", 0], b64);
    expect(eval_.body).toEqual({ result: ["T0s=", "T0s=", 7] });
    const pipeline = await post(
      "/pipeline",
      [
        ["SET", "w:k", "OK"],
        ["GET", "w:nil"],
        ["INCR", "w:k"],
      ],
      b64,
    );
    expect(pipeline.body).toEqual([
      { result: "OK" },
      { result: null },
      { error: "ERR value is not an integer or out of range" },
    ]);
  });

  it("answers NOSCRIPT as HTTP 400 on POST / and as a 200 item in a pipeline, verbatim", async () => {
    const noscript = "NOSCRIPT No matching script. Please use EVAL.";
    expect(await post("/", ["EVALSHA", "f".repeat(40), 0])).toMatchObject({
      status: 400,
      body: { error: noscript },
    });
    expect(await post("/pipeline", [["EVALSHA", "f".repeat(40), 0]])).toMatchObject({
      status: 200,
      body: [{ error: noscript }],
    });
  });

  it("stores and returns raw bytes (invalid UTF-8) from a path-style POST body", async () => {
    const bytes = Buffer.from([0xff, 0x00, 0xc3, 0x28, 0x80, 0x41]);
    expect((await raw("/set/w:bin", { method: "POST", body: bytes })).body).toEqual({ result: "OK" });
    const back = await raw("/get/w:bin", { headers: { "upstash-encoding": "base64" } });
    expect(Buffer.from(String(back.body.result), "base64")).toEqual(bytes);
    expect((await raw("/strlen/w:bin")).body).toEqual({ result: 6 });
  });

  it("answers HGETALL as the flat array Upstash sends, binary field names included", async () => {
    await raw("/hset/w:h/%FF%00f", { method: "POST", body: "v" });
    const res = await raw("/hgetall/w:h", { headers: { "upstash-encoding": "base64" } });
    expect(res.body).toEqual({ result: [Buffer.from([0xff, 0x00, 0x66]).toString("base64"), "dg=="] });
    expect((await post("/", ["HGETALL", "w:none"])).body).toEqual({ result: [] });
  });

  it("takes path-style commands with encoded segments and query arguments after the body", async () => {
    expect((await raw("/set/w%3Aa%2Fb/v%20w")).body).toEqual({ result: "OK" });
    expect((await raw("/get/w%3Aa%2Fb")).body).toEqual({ result: "v w" });
    await raw("/set/w:ex?EX=100", { method: "POST", body: "value" });
    expect((await raw("/get/w:ex")).body).toEqual({ result: "value" });
    expect((await raw("/ttl/w:ex")).body.result).toBeGreaterThan(90);
  });

  it("passes 64-bit integers through exactly", async () => {
    const res = await fetch(`${rest.url}/incrby/w:big/9007199254740993`, {
      headers: { authorization: `Bearer ${rest.token}` },
    });
    expect(await res.text()).toBe('{"result":9007199254740993}');
  });

  it("accepts ?_token= and refuses a missing or wrong token with 401", async () => {
    expect(await raw(`/ping?_token=${encodeURIComponent(rest.token)}`, { auth: false })).toMatchObject({
      status: 200,
      body: { result: "PONG" },
    });
    expect((await raw("/ping", { auth: false })).status).toBe(401);
    expect((await raw("/ping?_token=nope", { auth: false })).status).toBe(401);
    const wrong = await raw("/ping", { auth: false, headers: { authorization: "Bearer nope" } });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error).toEqual(expect.any(String));
  });

  it("sends an upstash-sync-token and accepts JSON with a charset", async () => {
    const res = await post("/", ["PING"], { "content-type": "application/json; charset=utf-8" });
    expect(res.body).toEqual({ result: "PONG" });
    expect(res.headers.get("upstash-sync-token")).toMatch(/.+/);
  });

  it("answers multi-exec as one error when Redis discards the transaction", async () => {
    const res = await post("/multi-exec", [["SET", "w:tx", "1"], ["NOSUCHCOMMAND"]]);
    expect(res.status).toBe(400);
    expect(res.body.error).toMatch(/unknown command/);
    expect((await raw("/exists/w:tx")).body).toEqual({ result: 0 });
  });

  it("rejects bad bodies, unsafe commands, oversized bodies and other methods clearly", async () => {
    const badJson = await raw("/", {
      method: "POST",
      body: "{nope",
      headers: { "content-type": "application/json" },
    });
    expect(badJson).toMatchObject({ status: 400, body: { error: expect.stringMatching(/not valid JSON/) } });
    expect((await post("/", { cmd: "GET" })).status).toBe(400);
    expect((await post("/", ["GET", { a: 1 }])).body.error).toMatch(/argument 1/);
    expect((await post("/pipeline", ["GET", "k"])).status).toBe(400);
    expect((await post("/", ["SELECT", "1"])).body.error).toMatch(/not available/);
    expect((await post("/", ["BLPOP", "w:list", 0])).body.error).toMatch(/not available/);
    expect((await raw("/set/w:huge", { method: "POST", body: "x".repeat(2 * 1024 * 1024) })).status).toBe(
      413,
    );
    expect((await raw("/ping", { method: "DELETE" })).status).toBe(405);
  });
});

it("the run's shared REST server (global setup) answers with the injected token", async () => {
  const c = new Redis({
    url: inject("redisRestUrl"),
    token: inject("redisRestToken"),
    enableTelemetry: false,
  });
  expect(await c.ping()).toBe("PONG");
  expect(inject("redisUrl")).toMatch(/^redis:\/\/127\.0\.0\.1:\d+$/);
});
