/**
 * The store's contract with Redis: the SHA it sends is the one Redis computes, a flushed script cache is
 * recovered transparently, the budget covers the whole decision, and failures come back as typed kinds.
 */
import { createHash } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { freePort, startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { overrideKey } from "../../src/engine/keys";
import { DECIDE, LEASE, REFUND, SCRIPTS } from "../../src/engine/script";
import { createStore, StoreError } from "../../src/engine/store";
import { directRedis, requestId, ruleCall, testStore, uniquePrefix } from "./lua-support";

let redis: IORedis;
beforeAll(() => {
  redis = directRedis();
});
afterAll(() => redis.quit());

describe("the scripts", () => {
  it("are one per call kind, each carrying Upstash's key-locking flag and every source it includes", () => {
    expect(SCRIPTS.map((script) => script.name)).toEqual([
      "decide",
      "decide-with-options",
      "lease",
      "refund",
      "settle",
      "give-back",
      "reaim",
      "fence",
      "list-write",
      "region-spend",
      "region-deposit",
    ]);
    for (const script of SCRIPTS) {
      expect(script.source.split("\n")[0]).toBe("#!lua flags=allow-key-locking");
      expect(script.source).not.toMatch(/--#(include|section)/);
    }
  });

  it("are each hashed to the SHA that SCRIPT LOAD returns on real Redis (through the REST server)", async () => {
    const store = testStore(uniquePrefix("sha"));
    const shas = new Set<string>();
    for (const script of SCRIPTS) {
      const sha = createHash("sha1").update(script.source).digest("hex");
      expect(await script.sha()).toBe(sha);
      expect(await store.redis.send(["script", "load", script.source])).toBe(sha);
      shas.add(sha);
    }
    expect(shas.size).toBe(SCRIPTS.length);
  });

  it("survive SCRIPT FLUSH: NOSCRIPT is answered by loading the call's script and retrying once", async () => {
    const store = testStore(uniquePrefix("flush"));
    const call = ruleCall({ algorithm: "token-bucket", limit: 3 });
    expect((await store.decide([call], requestId())).results[0]?.remaining).toBe(2);
    await redis.script("FLUSH");
    expect((await store.decide([call], requestId())).results[0]?.remaining).toBe(1);
    expect(await store.redis.send(["script", "exists", await DECIDE.sha()])).toEqual([1]);
    // A lease call and a refund, each its own script, recover the same way.
    const window = ruleCall({ algorithm: "fixed-window", limit: 10 });
    await redis.script("FLUSH");
    const leased = await store.decide([window], requestId(), { lease: { units: [4], maxMs: 1000 } });
    expect(leased.results[0]?.lease?.units).toBe(4);
    const exists = ["script", "exists", await LEASE.sha(), await REFUND.sha()];
    expect(await store.redis.send(exists)).toEqual([1, 0]);
    expect(await store.refund([{ ...window, cost: 3 }], requestId(), 0)).toEqual([3]);
    expect(await store.redis.send(["script", "exists", await REFUND.sha()])).toEqual([1]);
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
    const url = `http://127.0.0.1:${await freePort()}`; // nothing listens there
    const store = createStore({ url, token: "t", timeoutMs: 2000 });
    expect((await failure(store.decide([call], requestId()))).kind).toBe("unavailable");
  });

  it("a Redis BUSY with a script is `unavailable`", async () => {
    // A redis-server of its own (a script spinning there blocks every client of it), answering BUSY as soon
    // as a script has run longer than 50 ms.
    const own = await startRedis();
    const rest = await startRestServer({ redisUrl: own.url });
    const spinner = new IORedis(own.url, { maxRetriesPerRequest: 1 });
    const other = new IORedis(own.url, { maxRetriesPerRequest: 1 });
    try {
      await spinner.config("SET", "busy-reply-threshold", "50");
      const spin =
        "local t = redis.call('TIME'); local until_us = t[1] * 1000000 + t[2] + 700000; " +
        "repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] > until_us";
      const spinning = spinner.eval(spin, 0);
      // PONG until the script runs (another connection), then held until it has run past the threshold: BUSY.
      let answer: string = "PONG";
      for (let i = 0; i < 100 && answer === "PONG"; i++)
        answer = await other.ping().catch((e: Error) => e.message);
      expect(answer).toMatch(/^BUSY/);
      const store = createStore({ url: rest.url, token: rest.token, timeoutMs: 2000 });
      const error = await failure(store.decide([call], requestId()));
      expect(error.kind).toBe("unavailable");
      expect(error.message).toMatch(/^BUSY/);
      await spinning;
      expect((await store.decide([call], requestId())).allowed).toBe(true); // and decides once it is done
    } finally {
      spinner.disconnect();
      other.disconnect();
      await rest.close();
      await own.close();
    }
  });

  it("a Redis error inside the script is `script`", async () => {
    // HGETALL of an override key that holds a string (no admin ever writes one): the script stops there.
    const prefix = uniquePrefix("wrongtype");
    const store = testStore(prefix);
    const overridden = ruleCall({ algorithm: "gcra" });
    await redis.set(overrideKey(prefix, overridden.rule, overridden.identityHash), "not a hash");
    const error = await failure(store.decide([overridden], requestId()));
    expect(error.kind).toBe("script");
    expect(error.message).toMatch(/^WRONGTYPE/);
  });

  it("the budget covers the whole decision, NOSCRIPT reload included, and each request is sent once", async () => {
    // A stand-in for the REST endpoint: no real Redis answers EVALSHA with NOSCRIPT after a chosen delay and
    // then never answers the EVAL that follows.
    const seen: string[] = [];
    const server = await fakeRest((body, res) => {
      seen.push(String(body[0]));
      if (body[0] === "evalsha") {
        setTimeout(() => {
          res.writeHead(400, { "content-type": "application/json" });
          res.end(JSON.stringify({ error: "NOSCRIPT No matching script. Please use EVAL." }));
        }, 600);
      } // EVAL never answers
    });
    const store = createStore({ url: urlOf(server), token: "t", timeoutMs: 1000 });
    const started = Date.now();
    expect((await failure(store.decide([call], requestId()))).kind).toBe("timeout");
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(990);
    // A fresh budget for the EVAL would take 600 + 1000 ms at the least; the one budget leaves 550 ms to spare.
    expect(elapsed).toBeLessThan(1550);
    expect(seen).toEqual(["evalsha", "eval"]);
    server.closeAllConnections();
    server.close();
  });
});
