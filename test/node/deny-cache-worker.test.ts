// The deny cache under a hot denied identity, through the real Worker (bundled as for deploy, one isolate in
// Miniflare) in front of this file's own redis-server, reached through a relay that holds every command back
// as a distant Redis would (test/node/frozen-redis.ts): when a cached denial expires, one request of the
// isolate asks Redis again, and the others arriving meanwhile get that call's answer or, when it let its
// request through, decide themselves (docs/failure-modes.md, ephemeral deny cache).
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashIdentity, stateKey } from "../../src/engine/keys";
import { startWorker } from "../support/miniflare-worker.mjs";
import { type FrozenStack, sleep, startStack, TIMEOUT_MS, type Worker } from "./frozen-redis";

/** What the relay adds to every command: a refresh stays on its way long enough for a crowd to arrive. */
const LAG_MS = 150;
/** Worker + origin + a shared 2-core machine, on top of the decision budget. */
const MARGIN_MS = 500;
/** `DENY_CACHE_HOLD_MS` (src/resilience/deny-cache.ts): the longest a cached denial answers. */
const HOLD_MS = 1000;

let stack: FrozenStack;
let direct: IORedis;
let seq = 0;

beforeAll(async () => {
  stack = await startStack();
  direct = new IORedis(stack.redis.url, { maxRetriesPerRequest: 1 });
});

afterAll(async () => {
  direct?.disconnect();
  await stack?.close();
});

/**
 * A Worker of its own (its own deny cache), with one rule keyed on the client IP. `leases`: `RATE_LIMIT_LEASES`
 * (with leases on, a hot identity's requests also wait for one another's lease call: src/leases/index.ts).
 */
async function start(
  leases: string,
  rule: Record<string, unknown>,
): Promise<{ worker: Worker; prefix: string }> {
  const prefix = `denyflight${Date.now()}-${++seq}`;
  const worker = await startWorker({
    bindings: {
      ORIGIN_URL: stack.origin.url,
      UPSTASH_REDIS_REST_URL: stack.rest.url,
      UPSTASH_REDIS_REST_TOKEN: stack.rest.token,
      RATE_LIMIT_RULES: [{ key: "ip", algorithm: "fixed-window", period: "1h", ...rule }],
      RATE_LIMIT_PREFIX: prefix,
      RATE_LIMIT_TIMEOUT_MS: String(TIMEOUT_MS),
      RATE_LIMIT_LEASES: leases,
    },
  });
  return { worker, prefix };
}

/** EVALSHA + EVAL calls Redis has served since it started: the Worker's decisions (and nothing else of it). */
async function scriptCalls(): Promise<number> {
  const info = await direct.info("commandstats");
  let calls = 0;
  for (const match of info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) calls += Number(match[2]);
  return calls;
}

interface Answer {
  status: number;
  /** Local clock, ms, when the request was sent and when its response was in. */
  startedAt: number;
  endedAt: number;
  /** Answered from the deny cache (`Server-Timing` says `deny_cache`). */
  fromCache: boolean;
}

async function send(worker: Worker, ip: string): Promise<Answer> {
  const startedAt = Date.now();
  const response = await worker.fetch("/x", { headers: { "CF-Connecting-IP": ip } });
  await response.text();
  return {
    status: response.status,
    startedAt,
    endedAt: Date.now(),
    fromCache: /desc="deny_cache"/.test(response.headers.get("Server-Timing") ?? ""),
  };
}

/** `clients` clients of one IP, each sending its next request as soon as its last is answered, for `ms`. */
async function hammer(worker: Worker, ip: string, clients: number, ms: number): Promise<Answer[]> {
  const until = Date.now() + ms;
  const answers: Answer[] = [];
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (Date.now() < until) answers.push(await send(worker, ip));
    }),
  );
  return answers;
}

describe.each(["off", "on"])("a hot identity's cached denial, once it expires (leases %s)", (leases) => {
  it("is asked about again with one Redis call per isolate, however many requests arrive meanwhile", async () => {
    const { worker } = await start(leases, { name: "hot", limit: 1 });
    try {
      const ip = `198.51.100.${leases === "on" ? 8 : 7}1`;
      expect((await send(worker, ip)).status).toBe(200);
      expect((await send(worker, ip)).status).toBe(429); // by Redis; cached from here on
      stack.setLagMs(LAG_MS);
      const before = await scriptCalls();
      const startedAt = Date.now();
      const answers = await hammer(worker, ip, 16, 3500);
      const elapsedMs = Date.now() - startedAt;
      stack.setLagMs(0);
      const calls = (await scriptCalls()) - before;

      expect(answers.every((a) => a.status === 429)).toBe(true);
      expect(answers.length).toBeGreaterThan(100);
      // The denial cached before `startedAt` expires, is refreshed, and that answer expires again: at most one
      // call per second of hammering, where a call per waiting client (16 per expiry) went before.
      expect(calls).toBeGreaterThanOrEqual(2);
      expect(calls).toBeLessThanOrEqual(Math.ceil(elapsedMs / HOLD_MS));
    } finally {
      stack.setLagMs(0);
      await worker.dispose();
    }
  });

  it("gives the requests that waited Redis's answer once units came back, and admits none beyond them", async () => {
    const { worker, prefix } = await start(leases, { name: "room", limit: 3 });
    try {
      const ip = `198.51.100.${leases === "on" ? 8 : 7}2`;
      for (let i = 0; i < 3; i++) expect((await send(worker, ip)).status).toBe(200);
      const denied = await send(worker, ip);
      expect(denied.status).toBe(429);
      expect(denied.fromCache).toBe(false);
      expect((await send(worker, ip)).fromCache).toBe(true);
      // Units back in Redis without this isolate being told (an admin reset in another isolate before the
      // change log reaches this one, a lease's return): its cached denial stands until it expires.
      expect(await direct.del(stateKey(prefix, "room", await hashIdentity(ip)))).toBe(1);
      stack.setLagMs(LAG_MS);
      // A crowd arriving at once just after the denial expired (at most a second after Redis gave it).
      await sleep(denied.endedAt + HOLD_MS + 30 - Date.now());
      const crowd = await Promise.all(Array.from({ length: 12 }, () => send(worker, ip)));
      stack.setLagMs(0);

      // Room for 3 again, 12 requests: exactly 3 admitted (none on another request's unit), 9 denied.
      expect(crowd.filter((a) => a.status === 200)).toHaveLength(3);
      expect(crowd.filter((a) => a.status === 429)).toHaveLength(9);
      // Every answer came from a Redis call made after the expiry (the request's own, or the one it waited
      // for), none from the expired denial: no answer sooner than the relay's lag. (A request sent once the
      // first answers were in may be answered by the new denial they cached: only those sent before count.)
      const firstAnswerAt = Math.min(...crowd.map((a) => a.endedAt));
      const early = crowd.filter((a) => a.startedAt < firstAnswerAt);
      expect(early.length).toBeGreaterThan(0);
      for (const a of early) expect(a.endedAt - a.startedAt).toBeGreaterThanOrEqual(LAG_MS - 5);
    } finally {
      stack.setLagMs(0);
      await worker.dispose();
    }
  });

  it("follows the failure policy when the refreshing call fails, and keeps no request past its budget", async () => {
    const { worker } = await start(leases, { name: "closed", limit: 1, failure: "closed" });
    try {
      const ip = `198.51.100.${leases === "on" ? 8 : 7}3`;
      expect((await send(worker, ip)).status).toBe(200);
      expect((await send(worker, ip)).status).toBe(429);
      // Redis now answers later than the decision budget: the refresh times out.
      stack.setLagMs(TIMEOUT_MS + 500);
      const answers = await hammer(worker, ip, 8, 2000);
      stack.setLagMs(0);

      for (const a of answers) expect(a.endedAt - a.startedAt).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
      // Fail-closed: 429 from the cached denial while it holds, 503 once it expired and Redis could not answer.
      expect(answers.every((a) => a.status === 503 || (a.status === 429 && a.fromCache))).toBe(true);
      expect(answers.filter((a) => a.status === 503).length).toBeGreaterThanOrEqual(8);
    } finally {
      stack.setLagMs(0);
      await worker.dispose();
      // The relay keeps each connection's order: what it still holds back would delay the next test's commands.
      await sleep(TIMEOUT_MS + 500);
    }
  });
});
