/**
 * A sliding log holds one member per request, whatever the request costs (docs/script.md, "Sliding-log
 * state"): a request's Redis time and memory do not grow with its cost, the log stays exact under
 * concurrency, a refund gives back part of a request's units, a key the layout before wrote (one member per
 * unit) is counted unit by unit, and a rule that would let more than MAX_LOG_REQUESTS requests into one
 * window is a configuration error naming its field.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { MAX_LOG_REQUESTS } from "../../src/engine/algorithms/sliding-log";
import { stateKey } from "../../src/engine/keys";
import { createStore } from "../../src/engine/store";
import {
  directRedis,
  peekRemaining,
  redisNowMs,
  requestId,
  ruleCall,
  testStore,
  uniquePrefix,
} from "./lua-support";

const MINUTE = 60_000;

describe("a request of cost 1,000,000 under a sliding-log limit of 1e9", () => {
  // A redis-server of its own, so that its SLOWLOG holds this test's script calls only.
  let own: Awaited<ReturnType<typeof startRedis>>;
  let rest: Awaited<ReturnType<typeof startRestServer>>;
  let redis: IORedis;
  beforeAll(async () => {
    own = await startRedis();
    rest = await startRestServer({ redisUrl: own.url });
    redis = new IORedis(own.url, { maxRetriesPerRequest: 1 });
    await redis.config("SET", "slowlog-log-slower-than", "0");
  });
  afterAll(async () => {
    redis.disconnect();
    await rest.close();
    await own.close();
  });

  it("costs Redis microseconds and a few hundred bytes, and counts every one of its units", async () => {
    const prefix = uniquePrefix("log-big");
    const store = createStore({ url: rest.url, token: rest.token, prefix, timeoutMs: 5000 });
    const call = ruleCall({
      algorithm: "sliding-log",
      limit: 1_000_000_000,
      periodMs: MINUTE,
      cost: 1_000_000,
    });
    const key = stateKey(prefix, call.rule, call.identityHash);
    // The script loaded first (a first EVALSHA answers NOSCRIPT, then EVAL): only the decisions are timed.
    await store.decide([{ ...call, identityHash: `${call.identityHash}-warm` }], requestId());
    await redis.slowlog("RESET");
    for (let i = 1; i <= 2; i++) {
      const { allowed, results } = await store.decide([call], requestId());
      expect(allowed).toBe(true);
      expect(results[0]?.remaining).toBe(1_000_000_000 - i * 1_000_000);
    }
    // Each script call's own time in Redis: one member per unit took seconds (4.1 s measured, 118 MB).
    const calls = ((await redis.slowlog("GET", 100)) as [number, number, number, string[]][]).filter(
      ([, , , command]) => /^eval/i.test(String(command[0])),
    );
    expect(calls).toHaveLength(2);
    for (const [, , micros] of calls) expect(micros).toBeLessThan(50_000);
    // The request's member and the running total, nothing per unit.
    expect(await redis.zcard(key)).toBe(3);
    expect(Number(await redis.memory("USAGE", key))).toBeLessThan(1024);
    expect(await peekRemaining(store, call)).toBe(1_000_000_000 - 2_000_000);
  });
});

describe("the sliding log on the run's Redis", () => {
  let redis: IORedis;
  beforeAll(() => {
    redis = directRedis();
  });
  afterAll(() => redis.quit());

  it("admits at most `limit` units of mixed costs sent at once through two stores, and exactly `limit` in all", async () => {
    const prefix = uniquePrefix("log-race");
    const stores = [testStore(prefix), testStore(prefix)];
    const limit = 300;
    const call = ruleCall({ algorithm: "sliding-log", limit, periodMs: 10 * MINUTE });
    const costs = Array.from({ length: 120 }, (_, i) => 1 + (i % 13));
    const decisions = await Promise.all(
      costs.map((cost, i) => (stores[i % 2] as (typeof stores)[0]).decide([{ ...call, cost }], requestId())),
    );
    let admitted = decisions.reduce((sum, d, i) => sum + (d.allowed ? (costs[i] as number) : 0), 0);
    expect(admitted).toBeLessThanOrEqual(limit);
    expect(await peekRemaining(stores[0] as (typeof stores)[0], call)).toBe(limit - admitted);
    // What is left goes to requests of 1 unit, exactly: then nothing more.
    let ones = 0;
    while ((await (stores[ones % 2] as (typeof stores)[0]).decide([call], requestId())).allowed) ones++;
    admitted += ones;
    expect(admitted).toBe(limit);
    // One member per admitted request, and `total` holding their units.
    const key = stateKey(prefix, call.rule, call.identityHash);
    expect(await redis.zcard(key)).toBe(decisions.filter((d) => d.allowed).length + ones + 1);
    expect(Number(await redis.zscore(key, "total"))).toBe(-admitted);
  });

  it("gives back part of a request's units, the rest staying counted, and no more than it took", async () => {
    const prefix = uniquePrefix("log-refund");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "sliding-log", limit: 20, periodMs: 10 * MINUTE, cost: 10 });
    const id = requestId();
    expect((await store.decide([call], id)).allowed).toBe(true);
    const key = stateKey(prefix, call.rule, call.identityHash);
    const [, score] = await redis.zrangebyscore(key, "(0", "+inf", "WITHSCORES");
    const when = Number(score);
    expect(await store.refund([{ ...call, cost: 4 }], id, when)).toEqual([4]);
    expect(await peekRemaining(store, call)).toBe(14);
    expect(await redis.zrangebyscore(key, "(0", "+inf")).toEqual([`${id}:${when}#6`]);
    // Asking for more than is left gives back only the 6 still counted; then the member is gone.
    expect(await store.refund([{ ...call, cost: 10 }], id, when)).toEqual([6]);
    expect(await peekRemaining(store, call)).toBe(20);
    expect(await redis.zrangebyscore(key, "(0", "+inf")).toEqual([]);
    expect(await store.refund([{ ...call, cost: 1 }], id, when)).toEqual([0]);
  });

  it("counts a key the layout before wrote (one member per unit) unit by unit, and keeps counting after", async () => {
    const prefix = uniquePrefix("log-before");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "sliding-log", limit: 10, periodMs: 10 * MINUTE });
    const key = stateKey(prefix, call.rule, call.identityHash);
    // As the script before wrote them: `<request id>:<score>:<unit>`, 7 units of one request, 1 of another.
    const now = (await redisNowMs(redis)) * 1000;
    const old = Array.from({ length: 7 }, (_, u) => [
      String(now - 5000),
      `old:${now - 5000}:${u + 1}`,
    ]).flat();
    await redis.zadd(key, ...old, String(now - 1000), `other:${now - 1000}:1`);
    await redis.pexpire(key, 20 * MINUTE);
    expect(await peekRemaining(store, call)).toBe(2);
    expect((await store.decide([{ ...call, cost: 3 }], requestId())).allowed).toBe(false);
    expect((await store.decide([{ ...call, cost: 2 }], requestId())).allowed).toBe(true);
    expect(Number(await redis.zscore(key, "total"))).toBe(-10);
    expect((await store.decide([call], requestId())).allowed).toBe(false);
    // A return of the old request's units finds them by name, one unit each.
    expect(await store.refund([{ ...call, cost: 3 }], "old", now - 5000)).toEqual([3]);
    expect(await peekRemaining(store, call)).toBe(3);
  });
});

describe("the cap on requests in one sliding-log window", () => {
  const run = promisify(execFile);
  /** `npm run check-config` on a wrangler.toml holding `rule`. */
  async function checkConfig(rule: string): Promise<{ code: number; out: string }> {
    const dir = mkdtempSync(join(tmpdir(), "floodgate-log-"));
    const toml = `[vars]\nORIGIN_URL = "https://origin.example.com"\n[[vars.RATE_LIMIT_RULES]]\nname = "log"\nkey = "ip"\nalgorithm = "sliding-log"\nperiod = "1m"\n${rule}\n`;
    writeFileSync(join(dir, "wrangler.toml"), toml);
    try {
      const { stdout, stderr } = await run(
        process.execPath,
        ["scripts/check-config.mjs", "--config", join(dir, "wrangler.toml")],
        { env: { PATH: process.env.PATH ?? "" } },
      );
      return { code: 0, out: stdout + stderr };
    } catch (error) {
      const failed = error as { code: number; stdout: string; stderr: string };
      return { code: failed.code, out: failed.stdout + failed.stderr };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it("is a configuration error naming the field: a limit, or a tier's, letting in more requests than it", async () => {
    const header = await checkConfig('limit = 1000000000\ncost = "header:x-cost"');
    expect(header.code).not.toBe(0);
    expect(header.out).toContain(
      `RATE_LIMIT_RULES[0].limit: 1000000000 lets up to 1000000000 requests of 1 unit into one window, more than ${MAX_LOG_REQUESTS}`,
    );
    const tier = await checkConfig(
      `limit = 100\ncost = 10\ntier = "header:x-plan"\ntiers = { pro = { limit = ${MAX_LOG_REQUESTS * 10 + 10} } }`,
    );
    expect(tier.code).not.toBe(0);
    expect(tier.out).toContain("RATE_LIMIT_RULES[0].tiers.pro.limit:");
    // A large limit of costly requests lets few requests in: accepted.
    expect((await checkConfig("limit = 1000000000\ncost = 1000000")).code).toBe(0);
    expect((await checkConfig(`limit = ${MAX_LOG_REQUESTS}`)).code).toBe(0);
  });
});
