// The local REST server in front of a REAL Redis Cluster (3 masters, one replica each, created by
// `redis-cli --cluster create`), checked with the real @upstash/redis client and the engine's own store:
// commands routed by slot, CROSSSLOT passed through verbatim, MOVED/ASK followed after a slot migration, the
// decision script exact on the cluster with the hash-tagged key layout, and a failover survived.
import { createHash } from "node:crypto";
import { Redis } from "@upstash/redis";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type ClusterHandle,
  CROSSSLOT,
  type RestServer,
  startRedisCluster,
  startRestServer,
} from "../../redis-rest/index.mjs";
import { listOverrides, putOverride } from "../../src/admin/overrides";
import { overrideKey, stateKey } from "../../src/engine/keys";
import { createStore, type Store, StoreError } from "../../src/engine/store";
import type { Algorithm, RuleCall } from "../../src/engine/types";
import { createEngine } from "../../src/resilience/engine";
import type { ShardedDecider } from "../../src/resilience/sharded";
import { waitUntilRestReachesRedis } from "../support/rest-ready";
import { ALGORITHMS, offsetToWindowStart, requestId, ruleCall, sleep, uniquePrefix } from "./lua-support";

const HOUR = 3_600_000;
let cluster: ClusterHandle;
let rest: RestServer;
let client: Redis;
/** Direct connections to the three masters, by port. */
const masters = new Map<number, IORedis>();

beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3, replicas: 1 });
  rest = await startRestServer({ redisUrl: cluster.urls.join(","), cluster: true });
  await waitUntilRestReachesRedis(rest);
  client = new Redis({ url: rest.url, token: rest.token, enableTelemetry: false, retry: { retries: 0 } });
  for (const node of cluster.nodes.slice(0, 3)) {
    const redis = new IORedis(node.port, "127.0.0.1", { maxRetriesPerRequest: 0 });
    redis.on("error", () => {});
    masters.set(node.port, redis);
  }
}, 60_000);
afterAll(async () => {
  for (const redis of masters.values()) redis.disconnect();
  await rest?.close();
  await cluster?.close();
}, 30_000);

/** The port of the master that owns `key`'s slot, as the cluster itself says. */
async function ownerOf(key: string, any = masters.values().next().value as IORedis): Promise<number> {
  const slot = await any.cluster("KEYSLOT", key);
  const shards = await any.cluster("SLOTS");
  const owner = shards.find(([from, to]) => slot >= from && slot <= to)?.[2];
  if (!owner) throw new Error(`no owner for slot ${slot}`);
  return owner[1];
}

/**
 * The owner of `key`'s slot once every node but `dead` names the same one, and not `dead`. A promoted
 * replica knows of its promotion first; the other nodes hear of it over the cluster bus a moment later,
 * possibly after the REST server, told by the promoted replica, has already decided on it.
 */
async function ownerAfterFailover(key: string, dead: number, timeoutMs = 20_000): Promise<number> {
  const nodes = cluster.nodes
    .filter((node) => node.port !== dead)
    .map((node) => {
      const redis = new IORedis(node.port, "127.0.0.1", { maxRetriesPerRequest: 0 });
      redis.on("error", () => {});
      return redis;
    });
  try {
    const deadline = Date.now() + timeoutMs;
    let views: number[] = [];
    while (Date.now() < deadline) {
      // A node that cannot say yet (no owner for the slot, a busy node) counts as not having heard.
      views = await Promise.all(nodes.map((redis) => ownerOf(key, redis).catch(() => dead)));
      const owner = views[0] as number;
      if (owner !== dead && views.every((view) => view === owner)) return owner;
      await sleep(100);
    }
    throw new Error(`the nodes did not agree on a new owner within ${timeoutMs} ms: ${views.join(", ")}`);
  } finally {
    for (const redis of nodes) redis.disconnect();
  }
}

describe("@upstash/redis through the REST server on a Redis Cluster", () => {
  it("routes each command to the master owning its key, so keys spread over all three", async () => {
    const prefix = uniquePrefix("spread");
    const keys = Array.from({ length: 30 }, (_, i) => `${prefix}:${i}`);
    for (const [i, key] of keys.entries()) await client.set(key, i);
    expect(await Promise.all(keys.map((key) => client.get(key)))).toEqual(keys.map((_, i) => i));
    const owners = new Set<number>();
    for (const key of keys) {
      const owner = await ownerOf(key);
      expect(await (masters.get(owner) as IORedis).exists(key)).toBe(1);
      owners.add(owner);
    }
    expect(owners.size).toBe(3);
    // A pipeline may span slots: each command goes to its own master.
    const piped = client.pipeline();
    for (const key of keys.slice(0, 6)) piped.incr(key);
    expect(await piped.exec()).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it("passes CROSSSLOT through verbatim for a command or a transaction spanning slots", async () => {
    const prefix = uniquePrefix("cross");
    await expect(client.mget(`${prefix}:a`, `${prefix}:b`, `${prefix}:c`)).rejects.toThrow(CROSSSLOT);
    await expect(client.multi().set(`${prefix}:a`, 1).set(`${prefix}:b`, 2).exec()).rejects.toThrow(
      CROSSSLOT,
    );
    // Nothing of the refused transaction ran.
    expect(await client.exists(`${prefix}:a`)).toBe(0);
    // The same with a hash tag shares one slot: allowed, and atomic.
    const tagged = client
      .multi()
      .set(`${prefix}:{t}:a`, 1)
      .incr(`${prefix}:{t}:a`)
      .mget(`${prefix}:{t}:a`, `${prefix}:{t}:b`);
    expect(await tagged.exec()).toEqual(["OK", 2, [2, null]]);
  });

  it("loads a key-locking script on every master; EVALSHA runs where its keys live, and refuses keys across slots", async () => {
    const source =
      '#!lua flags=allow-key-locking\nreturn redis.call("INCRBY", KEYS[1], ARGV[1]) + redis.call("INCR", KEYS[2])';
    const sha = await client.scriptLoad(source);
    expect(sha).toBe(createHash("sha1").update(source).digest("hex"));
    expect(await client.scriptExists(sha)).toEqual([1]);
    const prefix = uniquePrefix("eval");
    const owners = new Set<number>();
    for (let i = 0; i < 12; i++) {
      const tag = `{${prefix}-${i}}`;
      expect(await client.evalsha(sha, [`${tag}:a`, `${tag}:b`], [10])).toBe(11);
      owners.add(await ownerOf(tag));
    }
    expect(owners.size).toBe(3); // no NOSCRIPT on any master
    await expect(client.evalsha(sha, [`${prefix}:a`, `${prefix}:b`], [1])).rejects.toThrow(CROSSSLOT);
    // One master forgets its scripts: EVALSHA there gets NOSCRIPT (so the client reloads), and SCRIPT EXISTS
    // says the script is no longer everywhere.
    const forgetful = masters.get(await ownerOf(`{${prefix}-0}`)) as IORedis;
    await forgetful.script("FLUSH");
    await expect(client.evalsha(sha, [`{${prefix}-0}:a`, `{${prefix}-0}:b`], [1])).rejects.toThrow(
      /NOSCRIPT No matching script/,
    );
    expect(await client.scriptExists(sha)).toEqual([0]);
  });

  it("lists keys of every master through one SCAN cursor", async () => {
    const prefix = uniquePrefix("scan");
    const keys = Array.from({ length: 40 }, (_, i) => `${prefix}:{${i}}`);
    for (const key of keys) await client.set(key, 1);
    const seen: string[] = [];
    let cursor = "0";
    do {
      const [next, batch] = await client.scan(cursor, { match: `${prefix}:*`, count: 10 });
      seen.push(...batch);
      cursor = String(next);
    } while (cursor !== "0");
    expect(seen.sort()).toEqual([...keys].sort());
  });

  it("follows ASK during a slot migration and MOVED after it", async () => {
    const key = `${uniquePrefix("moving")}:{migrate}`;
    await client.set(key, "before");
    const from = await ownerOf(key);
    const to = [...masters.keys()].find((port) => port !== from) as number;
    const source = masters.get(from) as IORedis;
    const target = masters.get(to) as IORedis;
    const slot = await source.cluster("KEYSLOT", key);
    const [sourceId, targetId] = await Promise.all([source.cluster("MYID"), target.cluster("MYID")]);
    await target.cluster("SETSLOT", slot, "IMPORTING", sourceId);
    await source.cluster("SETSLOT", slot, "MIGRATING", targetId);
    await source.migrate("127.0.0.1", to, "", 0, 5000, "KEYS", key);
    // Mid-migration the source answers ASK for a key it no longer has.
    expect(await client.get(key)).toBe("before");
    for (const redis of masters.values()) await redis.cluster("SETSLOT", slot, "NODE", targetId);
    // Now the source answers MOVED; the REST server follows it and learns the new owner.
    expect(await client.set(key, "after")).toBe("OK");
    expect(await target.get(key)).toBe("after");
    expect(await ownerOf(key)).toBe(to);
  });
});

describe("the decision script on the cluster (hash-tagged keys)", () => {
  const store = (prefix: string): Store =>
    createStore({ url: rest.url, token: rest.token, prefix, timeoutMs: 20_000 });

  it.each(ALGORITHMS)(
    "decides 1-3 rules of one identity in one call for %s, never CROSSSLOT",
    async (algorithm) => {
      const prefix = uniquePrefix(`script-${algorithm}`);
      const s = store(prefix);
      const owners = new Set<number>();
      for (let id = 0; id < 6; id++) {
        const identityHash = `who-${algorithm}-${id}`;
        const calls = [1, 2, 3].map((n) =>
          ruleCall({ algorithm, rule: `r${n}`, limit: 3, periodMs: HOUR, identityHash }),
        );
        for (const count of [1, 2, 3]) {
          const decision = await s.decide(calls.slice(0, count), requestId());
          expect(decision.results.map((r) => r.outcome)).toEqual(calls.slice(0, count).map(() => "allowed"));
        }
        // r1 has been spent 3 times (limit 3): a fourth call with all three rules is denied by r1 alone.
        const denied = await s.decide(calls, requestId());
        expect(denied.allowed).toBe(false);
        owners.add(await ownerOf(stateKey(prefix, "r1", identityHash)));
      }
      // The identities were decided on more than one master.
      expect(owners.size).toBeGreaterThan(1);
    },
  );

  it.each(ALGORITHMS)("admits exactly 100 of 500 concurrent decisions for %s", async (algorithm) => {
    const prefix = uniquePrefix(`exact-${algorithm}`);
    const stores = [store(prefix), store(prefix), store(prefix)];
    const call = ruleCall({ algorithm, limit: 100, periodMs: HOUR });
    const offset = await offsetToWindowStart(masters.values().next().value as IORedis, HOUR, 1000);
    const decisions = await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        (stores[i % 3] as Store).decide([call], requestId(), { timeOffsetMs: offset }),
      ),
    );
    expect(decisions.filter((d) => d.allowed).length).toBe(100);
  });
});

describe("a request whose rules key on different identities (slot groups)", () => {
  /** An isolate's engine on the cluster, split into slot groups as the Worker splits a request there. */
  const engineOnCluster = (prefix: string) =>
    createEngine({
      leases: "off", // the layers below leases, as these tests measure them
      endpoints: [{ url: rest.url, token: rest.token }],
      prefix,
      timeoutMs: 20_000,
      cluster: true,
    });
  /** Two identity hashes whose keys live on different masters. */
  async function hashesOnTwoMasters(prefix: string): Promise<[string, string]> {
    const ip = `ip-${prefix}`;
    const ipOwner = await ownerOf(stateKey(prefix, "per-ip", ip));
    for (let i = 0; ; i++) {
      const key = `key-${prefix}-${i}`;
      if ((await ownerOf(stateKey(prefix, "per-key", key))) !== ipOwner) return [ip, key];
    }
  }
  const REFUNDED: readonly Algorithm[] = [
    "fixed-window",
    "sliding-window",
    "sliding-log",
    "token-bucket",
    "gcra",
  ];

  it.each(REFUNDED)(
    "%s: never admits more than either limit under 200 concurrent requests through two isolates, and the refunds leave each rule counting exactly what was admitted",
    async (algorithm) => {
      const prefix = uniquePrefix(`groups-${algorithm}`);
      const [ipHash, keyHash] = await hashesOnTwoMasters(prefix);
      // Both rules bind: the per-key rule denies first, the per-IP rule then denies on its own too.
      const perIp = ruleCall({ algorithm, rule: "per-ip", limit: 30, periodMs: HOUR, identityHash: ipHash });
      const perKey = ruleCall({
        algorithm,
        rule: "per-key",
        limit: 20,
        periodMs: HOUR,
        identityHash: keyHash,
      });
      const isolates = [0, 1].map(() => engineOnCluster(prefix).decider);
      const refunds: Promise<unknown>[] = [];
      const waitUntil = (promise: Promise<unknown>) => void refunds.push(promise);
      const wave = () =>
        Promise.all(
          Array.from({ length: 100 }, (_, i) =>
            (isolates[i % 2] as ShardedDecider).decide([perIp, perKey], requestId(), { waitUntil }),
          ),
        );
      const first = await wave();
      // Every rule decided by Redis: no CROSSSLOT (that would come back as an undecided result).
      for (const d of first) {
        expect(d.results.map((r) => [r.source, r.reason])).toEqual([
          ["redis", undefined],
          ["redis", undefined],
        ]);
      }
      const admittedFirst = first.filter((d) => d.allowed).length;
      expect(admittedFirst).toBeLessThanOrEqual(20);
      await Promise.all(refunds);
      // Once the refunds have landed, each rule holds exactly the admitted requests: the per-IP rule was given
      // back every unit the per-key rule's denials had taken from it.
      const peek = async (call: RuleCall) =>
        (
          await createStore({ url: rest.url, token: rest.token, prefix }).decide([call], requestId(), {
            peek: true,
          })
        ).results[0]?.remaining;
      expect(await peek(perKey)).toBe(20 - admittedFirst);
      expect(await peek(perIp)).toBe(30 - admittedFirst);
      // A second wave takes what is left of the per-key limit, and not one more.
      const second = await wave();
      await Promise.all(refunds);
      const admitted = admittedFirst + second.filter((d) => d.allowed).length;
      expect(admitted).toBeLessThanOrEqual(20);
      expect(await peek(perIp)).toBe(30 - admitted);
      expect(await peek(perKey)).toBe(20 - admitted);
    },
    60_000,
  );

  it("a bucket with a delay: under 100 concurrent requests through two isolates, the refunds admit no request too many", async () => {
    // The per-IP rule holds requests over its rate (10 a second, burst 5, up to 5 s); the per-key rule denies
    // most of them after the groups decided, so their held slots go back by compare-and-set. A slot given back
    // while a later one stood above it would let a later request take a slot an admitted one holds:
    // over-admission, seen here as two admitted requests whose TATs lie closer than one interval (100 ms).
    const prefix = uniquePrefix("groups-delay");
    const [ipHash, keyHash] = await hashesOnTwoMasters(prefix);
    const perIp = ruleCall({
      algorithm: "gcra",
      rule: "per-ip",
      limit: 10,
      periodMs: 1000,
      burst: 5,
      delayMs: 5000,
      identityHash: ipHash,
    });
    const perKey = ruleCall({
      algorithm: "fixed-window",
      rule: "per-key",
      limit: 25,
      periodMs: HOUR,
      identityHash: keyHash,
    });
    const isolates = [0, 1].map(() => engineOnCluster(prefix).decider);
    const refunds: Promise<unknown>[] = [];
    const waitUntil = (promise: Promise<unknown>) => void refunds.push(promise);
    const wave = (calls: RuleCall[]) =>
      Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          // Stamped: each result carries the TAT its request wrote (`reservation`), held or not.
          (isolates[i % 2] as ShardedDecider).decide(calls, requestId(), { waitUntil, stamps: true }),
        ),
      );
    const split = await wave([perIp, perKey]);
    await Promise.all(refunds);
    const admittedSplit = split.filter((d) => d.allowed).length;
    expect(admittedSplit).toBeGreaterThan(0);
    expect(admittedSplit).toBeLessThanOrEqual(25);
    // Some were allowed by the per-IP rule and denied by the per-key rule: their slots were the refunds' work.
    expect(split.filter((d) => !d.allowed && d.results[0]?.outcome === "allowed").length).toBeGreaterThan(10);
    // Then the per-IP rule alone takes whatever the refunds left (under this concurrency a compare-and-set
    // finds its TAT still standing for few of them, so that may be nothing).
    const alone = await wave([perIp]);
    const slots = [...split, ...alone]
      .filter((d) => d.allowed)
      .map((d) => d.results[0]?.reservation?.tatUs ?? 0)
      .sort((a, b) => a - b);
    expect(slots[0]).toBeGreaterThan(0);
    const closest = Math.min(...slots.slice(1).map((slot, k) => slot - (slots[k] as number)));
    expect(closest).toBeGreaterThanOrEqual(100_000);
  }, 60_000);

  it("a bucket with a delay: a split request the other master denies leaves the bucket as it was", async () => {
    const prefix = uniquePrefix("groups-delay-back");
    const [ipHash, keyHash] = await hashesOnTwoMasters(prefix);
    const perIp = ruleCall({
      algorithm: "gcra",
      rule: "per-ip",
      limit: 1,
      periodMs: 1000,
      burst: 1,
      delayMs: 10_000,
      identityHash: ipHash,
    });
    const perKey = ruleCall({
      algorithm: "fixed-window",
      rule: "per-key",
      limit: 1,
      periodMs: HOUR,
      identityHash: keyHash,
    });
    const engine = engineOnCluster(prefix);
    const ipOwner = masters.get(await ownerOf(stateKey(prefix, "per-ip", ipHash))) as IORedis;
    await engine.decider.decide([perIp], requestId()); // the burst of one spent: the next is held
    await engine.decider.decide([perKey], requestId()); // the key's one unit spent
    const before = await ipOwner.get(stateKey(prefix, "per-ip", ipHash));
    const refunds: Promise<unknown>[] = [];
    const decision = await engine.decider.decide([perIp, perKey], requestId(), {
      waitUntil: (p) => void refunds.push(p),
    });
    expect(decision.results.map((r) => r.outcome)).toEqual(["allowed", "denied"]);
    await Promise.all(refunds);
    expect(refunds).toHaveLength(1);
    expect(await ipOwner.get(stateKey(prefix, "per-ip", ipHash))).toBe(before);
  });

  it("sends ONE script call for rules of one identity, one per identity otherwise", async () => {
    const prefix = uniquePrefix("groups-calls");
    const [ipHash, keyHash] = await hashesOnTwoMasters(prefix);
    const engine = engineOnCluster(prefix);
    const evalshas = async () => {
      let calls = 0;
      for (const redis of masters.values()) {
        const info = await redis.info("commandstats");
        calls += Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(info)?.[1] ?? 0);
      }
      return calls;
    };
    const one = [
      ruleCall({ algorithm: "gcra", rule: "a", identityHash: ipHash }),
      ruleCall({ algorithm: "fixed-window", rule: "b", identityHash: ipHash }),
    ];
    let before = await evalshas();
    expect((await engine.decider.decide(one, requestId())).allowed).toBe(true);
    expect((await evalshas()) - before).toBe(1);
    const two = [
      one[0] as RuleCall,
      ruleCall({ algorithm: "fixed-window", rule: "b", identityHash: keyHash }),
    ];
    before = await evalshas();
    const decision = await engine.decider.decide(two, requestId());
    expect(decision.allowed).toBe(true);
    expect(decision.results.map((r) => [r.call.rule, r.source])).toEqual([
      ["a", "redis"],
      ["b", "redis"],
    ]);
    expect((await evalshas()) - before).toBe(2);
  });
});

describe("the admin API's Redis calls on the cluster", () => {
  it("stores overrides atomically and lists every one of a rule exactly once across all masters", async () => {
    const prefix = uniquePrefix("overrides");
    const { redis } = createStore({ url: rest.url, token: rest.token, prefix });
    const hashes = Array.from({ length: 60 }, (_, i) => `id-${i}_x`);
    for (const hash of hashes) {
      await putOverride({ prefix, rule: "api", identityHash: hash }, { limit: 7, burst: 7 }, 3600, redis);
    }
    await putOverride(
      { prefix, rule: "other", identityHash: "id-0_x" },
      { limit: 1, burst: 1 },
      undefined,
      redis,
    );
    const owners = new Set(await Promise.all(hashes.map((h) => ownerOf(overrideKey(prefix, "api", h)))));
    expect(owners.size).toBe(3);
    const seen: string[] = [];
    let cursor: string | null = "0";
    while (cursor !== null) {
      const page: Awaited<ReturnType<typeof listOverrides>> = await listOverrides(
        redis,
        prefix,
        "api",
        cursor,
        7,
      );
      expect(page.items.length).toBeLessThanOrEqual(7);
      for (const item of page.items) expect(item).toMatchObject({ limit: 7, burst: 7 });
      seen.push(...page.items.map((item) => item.identityHash));
      cursor = page.nextCursor;
    }
    expect(seen.sort()).toEqual([...hashes].sort());
  });
});

describe("a master killed", () => {
  it("fails decisions on its slots as 'cannot answer' during the switch, then its replica decides them", async () => {
    const prefix = uniquePrefix("failover");
    // The first five are counted before anything fails: a budget a loaded machine does not exceed (2 s did).
    // During the switch a shorter one, so that several decisions the dead master cannot answer fail within
    // the loop's deadline, and yet a loaded machine's answer from the promoted replica fits.
    const before = createStore({ url: rest.url, token: rest.token, prefix, timeoutMs: 20_000 });
    const s = createStore({ url: rest.url, token: rest.token, prefix, timeoutMs: 5000 });
    const call = ruleCall({ algorithm: "sliding-log", limit: 1000, periodMs: HOUR });
    for (let i = 0; i < 5; i++) expect((await before.decide([call], requestId())).allowed).toBe(true);
    const victim = await ownerOf(stateKey(prefix, call.rule, call.identityHash));
    const node = cluster.nodes.find((n) => n.port === victim);
    if (!node) throw new Error("unreachable");
    // The replica has the writes above before its master dies. WAIT only waits for the writes of the
    // connection that sends it (one that wrote nothing is answered at once), and the REST server made the
    // writes above: so this connection writes after them, in the same slot, and waits for that (replication
    // is one ordered stream; a loaded machine may take longer than a second).
    const master = masters.get(victim) as IORedis;
    await master.set(`${stateKey(prefix, call.rule, call.identityHash)}:barrier`, "1", "PX", 60_000);
    expect(await master.wait(1, 10_000)).toBe(1);
    await node.kill();

    const failures = new Set<string>();
    let remaining: number | undefined;
    const deadline = Date.now() + 20_000;
    while (remaining === undefined && Date.now() < deadline) {
      try {
        const decision = await s.decide([call], requestId());
        remaining = decision.results[0]?.remaining;
      } catch (error) {
        expect(error).toBeInstanceOf(StoreError);
        // "Cannot answer", so the failure policy applies; never a script error (a REST 503 included).
        expect(["unavailable", "timeout"]).toContain((error as StoreError).kind);
        failures.add((error as Error).message.replace(/, command was:.*/s, ""));
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    // During the switch Redis could not answer (a StoreError: the failure policy's case), never CROSSSLOT or
    // another script error. (The REST server's 503 reads "ERR Redis is unavailable: …".)
    const cannotAnswer = /^ERR Redis is unavailable|^CLUSTERDOWN|exceeded its budget/;
    expect([...failures].filter((message) => !cannotAnswer.test(message))).toEqual([]);
    expect(failures.size).toBeGreaterThan(0);
    // The promoted replica had the identity's state: the sixth request is counted on top of the first five.
    expect(remaining).toBe(1000 - 6);
    // And it is a former replica that now owns the slot, as every surviving node says once it has heard.
    const owner = await ownerAfterFailover(stateKey(prefix, call.rule, call.identityHash), victim);
    expect(masters.has(owner)).toBe(false);
    expect(await cluster.role(owner)).toBe("master");
  }, 60_000);
});
