/**
 * The store's contract with Redis: the SHA it sends is the one Redis computes, a flushed script cache is
 * recovered transparently, the budget covers the whole decision, and failures come back as typed kinds.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { SCRIPT_SOURCE, scriptSha } from "../../src/engine/script";
import { createStore, StoreError } from "../../src/engine/store";
import { directRedis, requestId, ruleCall, testStore, uniquePrefix } from "./lua-support";

let redis: IORedis;
beforeAll(() => {
  redis = directRedis();
});
afterAll(() => redis.quit());

describe("the script", () => {
  it("carries Upstash's key-locking flag", () => {
    expect(SCRIPT_SOURCE.split("\n")[0]).toBe("#!lua flags=allow-key-locking");
  });

  it("is hashed to the SHA that SCRIPT LOAD returns (through the REST server)", async () => {
    const store = testStore(uniquePrefix("sha"));
    const fileSha = createHash("sha1").update(readFileSync("lua/floodgate.lua")).digest("hex");
    expect(await scriptSha()).toBe(fileSha);
    expect(await store.redis.scriptLoad(SCRIPT_SOURCE)).toBe(fileSha);
  });

  it("survives SCRIPT FLUSH: NOSCRIPT is answered by loading it and retrying once", async () => {
    const store = testStore(uniquePrefix("flush"));
    const call = ruleCall({ algorithm: "token-bucket", limit: 3 });
    expect((await store.decide([call], requestId())).results[0]?.remaining).toBe(2);
    await redis.script("FLUSH");
    expect((await store.decide([call], requestId())).results[0]?.remaining).toBe(1);
    expect(await store.redis.scriptExists(await scriptSha())).toEqual([1]);
  });
});

/** An HTTP server that answers the way `respond` says (or never). */
async function fakeRest(
  respond: (body: string[], res: import("node:http").ServerResponse) => void,
): Promise<Server> {
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => {
      body += chunk;
    });
    req.on("end", () => respond(JSON.parse(body), res));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}
const urlOf = (server: Server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

async function failure(promise: Promise<unknown>): Promise<StoreError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(StoreError);
  return error as StoreError;
}

describe("when Redis cannot answer", () => {
  const call = ruleCall({ algorithm: "gcra" });

  it("a wrong token is an `auth` failure", async () => {
    const store = createStore({ url: inject("redisRestUrl"), token: "wrong", timeoutMs: 2000 });
    expect((await failure(store.decide([call], requestId()))).kind).toBe("auth");
  });

  it("a closed port is `unavailable`", async () => {
    const server = await fakeRest(() => {});
    const url = urlOf(server);
    await new Promise((resolve) => server.close(resolve));
    const store = createStore({ url, token: "t", timeoutMs: 2000 });
    expect((await failure(store.decide([call], requestId()))).kind).toBe("unavailable");
  });

  it("a Redis BUSY error is `unavailable`, a script error is `script`", async () => {
    let reply = "BUSY Redis is busy running a script.";
    const server = await fakeRest((_body, res) => {
      res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: reply }));
    });
    const store = createStore({ url: urlOf(server), token: "t", timeoutMs: 2000 });
    expect((await failure(store.decide([call], requestId()))).kind).toBe("unavailable");
    reply = "ERR user_script:1: Script attempted to access nonexistent global variable";
    expect((await failure(store.decide([call], requestId()))).kind).toBe("script");
    server.close();
  });

  it("the budget covers the whole decision, NOSCRIPT reload included, and each request is sent once", async () => {
    const seen: string[] = [];
    const server = await fakeRest((body, res) => {
      seen.push(String(body[0]));
      if (body[0] === "evalsha") {
        setTimeout(() => {
          res.writeHead(400, { "content-type": "application/json" });
          res.end(JSON.stringify({ error: "NOSCRIPT No matching script. Please use EVAL." }));
        }, 150);
      } // EVAL never answers
    });
    const store = createStore({ url: urlOf(server), token: "t", timeoutMs: 300 });
    const started = Date.now();
    expect((await failure(store.decide([call], requestId()))).kind).toBe("timeout");
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(290);
    expect(elapsed).toBeLessThan(450); // not 150 + a fresh 300
    expect(seen).toEqual(["evalsha", "eval"]);
    server.closeAllConnections();
    server.close();
  });
});
