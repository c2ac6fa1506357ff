/**
 * The Redis port (src/engine/redis.ts) against the real local REST server and real redis-servers: what it
 * sends and gets back, NOSCRIPT recovered with exactly one EVAL, and each error kind from a real failure
 * (docs/redis-port.md). Tests that break a Redis own it: a redis-server and a REST server of their own.
 */
import { createHash } from "node:crypto";
import { Redis as IORedis } from "ioredis";
import { afterEach, describe, expect, inject, it, vi } from "vitest";
import { freePort, startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { createRedisPort, type RedisPort, type RedisScript } from "../../src/engine/redis";
import { StoreError } from "../../src/engine/store-error";
import { uniquePrefix } from "./lua-support";

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const sharedPort = (token = inject("redisRestToken")) =>
  createRedisPort({ url: inject("redisRestUrl"), token, timeoutMs: 5000 });

/** A redis-server, its REST server and a port on it, for one test that breaks them; closed after it. */
async function ownStack(args: string[] = []) {
  const redis = await startRedis({ args });
  const rest = await startRestServer({ redisUrl: redis.url });
  const direct = new IORedis(redis.url, { maxRetriesPerRequest: 1 });
  direct.on("error", () => {});
  cleanups.push(
    () => redis.close(),
    () => rest.close(),
    () => direct.disconnect(),
  );
  return {
    redis,
    rest,
    direct,
    port: createRedisPort({ url: rest.url, token: rest.token, timeoutMs: 5000 }),
  };
}

/** A script the way src/engine/script.ts exports one: its SHA computed from its source. */
function scriptOf(name: string, source: string): RedisScript {
  const sha = createHash("sha1").update(source).digest("hex");
  return { name, source, sha: async () => sha };
}

/** The error a call rejects with, which must be a StoreError. */
async function failure(promise: Promise<unknown>): Promise<StoreError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(StoreError);
  return error as StoreError;
}

/** The first word of each command the port sent, as the REST server received it (every fetch is one request). */
function watchRequests(): string[][] {
  const sent: string[][] = [];
  const realFetch = globalThis.fetch;
  vi.spyOn(globalThis, "fetch").mockImplementation((input, init) => {
    const body = JSON.parse(String(init?.body)) as unknown[];
    sent.push(Array.isArray(body[0]) ? body.map((c) => String((c as unknown[])[0])) : [String(body[0])]);
    return realFetch(input, init);
  });
  return sent;
}

describe("commands through the REST API", () => {
  it("sends one command and gets Redis's reply as Redis sent it (a hash as its flat array)", async () => {
    const port = sharedPort();
    const key = `${uniquePrefix("port")}:h`;
    expect(await port.send(["hset", key, "limit", 7, "burst", 9])).toBe(2);
    expect(await port.send(["hgetall", key])).toEqual(["limit", "7", "burst", "9"]);
    expect(await port.send(["hmget", key, "burst", "absent"])).toEqual(["9", null]);
    expect(await port.send(["ttl", key])).toBe(-1);
  });

  it("pipelines several commands in one request, replies in order", async () => {
    const port = sharedPort();
    const key = `${uniquePrefix("port")}:n`;
    const sent = watchRequests();
    expect(await port.pipeline([["incr", key], ["incrby", key, 5], ["get", key], ["ping"]])).toEqual([
      1,
      6,
      "6",
      "PONG",
    ]);
    expect(sent).toEqual([["incr", "incrby", "get", "ping"]]);
  });

  it("a pipeline with a failed command throws that command's error, after the others ran", async () => {
    const port = sharedPort();
    const key = `${uniquePrefix("port")}:s`;
    const error = await failure(
      port.pipeline([
        ["set", key, "x"],
        ["incr", key],
        ["set", `${key}:2`, "y"],
      ]),
    );
    expect(error.kind).toBe("script");
    expect(error.code).toBe("ERR");
    expect(await port.send(["mget", key, `${key}:2`])).toEqual(["x", "y"]);
  });

  it("runs a transaction: all of it or, refused, none of it (unlike a pipeline)", async () => {
    const port = sharedPort();
    const key = `${uniquePrefix("port")}:o`;
    expect(
      await port.multi([
        ["del", key],
        ["hset", key, "limit", 2],
        ["expire", key, 60],
      ]),
    ).toEqual([0, 1, 1]);
    expect(await port.send(["hgetall", key])).toEqual(["limit", "2"]);
    // A command Redis refuses to queue (wrong arity) discards the whole transaction: the DEL before it too.
    const error = await failure(
      port.multi([
        ["del", key],
        ["hset", key],
      ]),
    );
    expect(error.kind).toBe("script");
    expect(await port.send(["hgetall", key])).toEqual(["limit", "2"]);
  });
});

describe("scripts", () => {
  it("runs by EVALSHA; after SCRIPT FLUSH one EVAL loads it again, then EVALSHA alone", async () => {
    const { port, direct } = await ownStack();
    const script = scriptOf("incr", "return redis.call('INCRBY', KEYS[1], ARGV[1])");
    const sent = watchRequests();
    expect(await port.runScript(script, ["k"], [2])).toBe(2); // never loaded: NOSCRIPT, then EVAL
    expect(await port.runScript(script, ["k"], [3])).toBe(5);
    expect(sent).toEqual([["evalsha"], ["eval"], ["evalsha"]]);
    await direct.script("FLUSH");
    sent.length = 0;
    expect(await port.runScript(script, ["k"], [4])).toBe(9);
    expect(await port.runScript(script, ["k"], [1])).toBe(10);
    expect(sent).toEqual([["evalsha"], ["eval"], ["evalsha"]]);
    expect(await direct.script("EXISTS", await script.sha())).toEqual([1]);
  });

  it("retries once only: a SHA Redis never knows costs each call one EVALSHA and one EVAL, no more", async () => {
    const port = sharedPort();
    // A script whose sha() names another text: its EVALSHA can never succeed.
    const lying: RedisScript = { name: "lying", source: "return 7", sha: async () => "0".repeat(40) };
    const sent = watchRequests();
    expect(await port.runScript(lying, [], [])).toBe(7);
    expect(await port.runScript(lying, [], [])).toBe(7);
    expect(sent).toEqual([["evalsha"], ["eval"], ["evalsha"], ["eval"]]);
  });

  it("an error inside the script is `script`, its Redis code kept, and is not retried", async () => {
    const port = sharedPort();
    const key = `${uniquePrefix("port")}:str`;
    await port.send(["set", key, "not a hash"]);
    const script = scriptOf("hlen", "return redis.call('HLEN', KEYS[1])");
    await port.runScript(script, [`${key}:empty`], []); // loaded
    const sent = watchRequests();
    const error = await failure(port.runScript(script, [key], []));
    expect(error).toMatchObject({ kind: "script", code: "WRONGTYPE" });
    expect(error.message).toMatch(/^WRONGTYPE/);
    expect(sent).toEqual([["evalsha"]]);
  });

  it("with its deadline passed when NOSCRIPT comes back, sends no EVAL (`timeout`), even if its signal allows more", async () => {
    const { port, direct, redis } = await ownStack();
    const script = scriptOf("incr", "return redis.call('INCR', KEYS[1])");
    await direct.script("FLUSH");
    const sent = watchRequests();
    // Redis frozen past the deadline: its NOSCRIPT arrives after it, while the caller's signal still runs.
    redis.stop();
    cleanups.push(() => redis.cont());
    const started = Date.now();
    const call = failure(
      port.runScript(script, ["k"], [], { deadline: started + 200, signal: AbortSignal.timeout(5000) }),
    );
    await new Promise((resolve) => setTimeout(resolve, 400));
    redis.cont();
    const error = await call;
    expect(error.kind).toBe("timeout");
    expect(sent).toEqual([["evalsha"]]);
    expect(await direct.get("k")).toBeNull(); // never run
  });
});

describe("each kind of failure, from a real one", () => {
  it("a wrong token: `auth`, for a command, a pipeline and a script", async () => {
    const port = sharedPort("not-the-token");
    expect((await failure(port.send(["ping"]))).kind).toBe("auth");
    expect((await failure(port.pipeline([["ping"]]))).kind).toBe("auth");
    expect((await failure(port.runScript(scriptOf("one", "return 1"), [], []))).kind).toBe("auth");
  });

  it("nothing listening: `unavailable`", async () => {
    const port = createRedisPort({
      url: `http://127.0.0.1:${await freePort()}`,
      token: "t",
      timeoutMs: 2000,
    });
    expect((await failure(port.send(["ping"]))).kind).toBe("unavailable");
  });

  it("Redis killed behind the REST server (its 503): `unavailable`; answers again once it is back", async () => {
    const { port, redis } = await ownStack();
    expect(await port.send(["ping"])).toBe("PONG");
    await redis.kill();
    const error = await failure(port.send(["incr", "k"]));
    expect(error.kind).toBe("unavailable");
    await redis.restart();
    await vi.waitFor(async () => expect(await port.send(["ping"])).toBe("PONG"), { timeout: 5000 });
  });

  it("Redis BUSY running a script: `unavailable`", async () => {
    const { port, direct, redis } = await ownStack();
    await direct.config("SET", "busy-reply-threshold", "50");
    const spinner = new IORedis(redis.url, { maxRetriesPerRequest: 1 });
    cleanups.push(() => spinner.disconnect());
    const spin =
      "local t = redis.call('TIME'); local until_us = t[1] * 1000000 + t[2] + 700000; " +
      "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] > until_us";
    const spinning = spinner.eval(spin, 0);
    let error: StoreError | undefined;
    for (let i = 0; i < 100 && error?.code !== "BUSY"; i++) {
      error = await port.send(["ping"]).then(
        () => undefined,
        (e: StoreError) => e,
      );
    }
    expect(error).toMatchObject({ kind: "unavailable", code: "BUSY" });
    await spinning;
    expect(await port.send(["ping"])).toBe("PONG");
  });

  it("Redis out of memory (OOM): `unavailable`", async () => {
    const { port, direct } = await ownStack();
    await direct.config("SET", "maxmemory-policy", "noeviction");
    await direct.config("SET", "maxmemory", "1");
    const error = await failure(
      port.runScript(scriptOf("set", "return redis.call('SET', KEYS[1], 'x')"), ["k"], []),
    );
    expect(error).toMatchObject({ kind: "unavailable", code: "OOM" });
  });

  it("a read-only replica (READONLY), and one whose master is gone (MASTERDOWN): `unavailable`", async () => {
    const { port, direct } = await ownStack();
    // A replica of a master that does not exist: writes are refused, and with stale data off, reads too.
    await direct.replicaof("127.0.0.1", await freePort());
    expect(await failure(port.send(["set", "k", "v"]))).toMatchObject({
      kind: "unavailable",
      code: "READONLY",
    });
    await direct.config("SET", "replica-serve-stale-data", "no");
    expect(await failure(port.send(["get", "k"]))).toMatchObject({ kind: "unavailable", code: "MASTERDOWN" });
  });

  it("a frozen Redis past the call's budget: `timeout`, at the deadline, not the REST server's timeout", async () => {
    const { port, redis } = await ownStack();
    expect(await port.send(["ping"])).toBe("PONG");
    redis.stop();
    cleanups.push(() => redis.cont());
    const started = Date.now();
    const error = await failure(port.send(["ping"], { deadline: started + 300 }));
    expect(error.kind).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(2000);
    // A caller's own signal aborts it the same way.
    const aborted = await failure(port.send(["ping"], { signal: AbortSignal.timeout(100) }));
    expect(aborted.kind).toBe("timeout");
  });

  it("a port with no budget given waits at most its own `timeoutMs`", async () => {
    const { rest, redis } = await ownStack();
    const port: RedisPort = createRedisPort({ url: rest.url, token: rest.token, timeoutMs: 300 });
    redis.stop();
    cleanups.push(() => redis.cont());
    const started = Date.now();
    expect((await failure(port.send(["ping"]))).kind).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(2000);
  });
});
