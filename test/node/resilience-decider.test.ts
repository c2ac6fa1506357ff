// The decider against the real store, the real REST server and this file's own redis-server, which the
// tests kill, freeze (SIGSTOP), flush and restart: decisions never throw, never hang past the budget,
// never count twice, and the breaker, deny cache and fallback do what docs/failure-modes.md says.
import { createServer, request as httpRequest } from "node:http";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { DEFAULTS } from "../../src/engine/defaults";
import { stateKey } from "../../src/engine/keys";
import { createStore } from "../../src/engine/store";
import type { Decision, RuleCall } from "../../src/engine/types";
import { type DeciderOptions, type DecisionStore, EndpointDecider } from "../../src/resilience/decider";
import { DENY_CACHE_HOLD_MS } from "../../src/resilience/deny-cache";
import { waitUntilRestReachesRedis } from "../support/rest-ready";

/** Budget of the tests about the budget; the others get a roomy one, this machine is shared and busy. */
const TIMEOUT_MS = 200;
const ROOMY_TIMEOUT_MS = 2000;
/** What a decision may take beyond the budget on this shared 2-core machine. */
const MARGIN_MS = 250;

let redis: Awaited<ReturnType<typeof startRedis>>;
let rest: Awaited<ReturnType<typeof startRestServer>>;
let direct: IORedis;
let seq = 0;

beforeAll(async () => {
  redis = await startRedis();
  rest = await startRestServer({ redisUrl: redis.url });
  direct = new IORedis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  direct.on("error", () => {});
});

afterAll(async () => {
  direct?.disconnect();
  await rest?.close();
  await redis?.close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A rule call with a name of its own, so tests never share state. Its fixed window is an hour, not a minute:
 * tests count decisions over several calls, in Redis or in the fallback's local window (aligned the same
 * way), and a minute's edge would fall between them in about one run in a hundred.
 */
function rule(overrides: Partial<RuleCall> = {}): RuleCall {
  seq += 1;
  return {
    rule: `res-${seq}`,
    algorithm: "fixed-window",
    limit: 3,
    periodMs: 3_600_000,
    burst: 3,
    cost: 1,
    mode: "on",
    failure: "open",
    identityHash: `client-${seq}`,
    override: false,
    ...overrides,
  };
}

/** A decider on the real store; `timeoutMs` is roomy unless a test is about the budget. */
function setup(options: DeciderOptions = {}, store?: ReturnType<typeof createStore>) {
  const timeoutMs = options.timeoutMs ?? ROOMY_TIMEOUT_MS;
  const logs: string[] = [];
  const decider = new EndpointDecider(store ?? createStore({ url: rest.url, token: rest.token, timeoutMs }), {
    log: (line) => logs.push(line),
    ...options,
    timeoutMs,
  });
  return { decider, logs, store };
}

/** EVALSHA + EVAL calls Redis has served since it started. */
async function scriptCalls(): Promise<number> {
  const info = await direct.info("commandstats");
  let calls = 0;
  for (const match of info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) calls += Number(match[2]);
  return calls;
}

async function timed(run: () => Promise<Decision>): Promise<{ decision: Decision; ms: number }> {
  const started = performance.now();
  const decision = await run();
  return { decision, ms: performance.now() - started };
}

describe("with Redis healthy", () => {
  it("decides from Redis and reports ok", async () => {
    const { decider } = setup();
    const call = rule();
    const { decision } = await timed(() => decider.decide([call], "r1"));
    expect(decision.allowed).toBe(true);
    expect(decision.results[0]).toMatchObject({ source: "redis", outcome: "allowed", remaining: 2 });
    expect(decider.health()).toMatchObject({ status: "ok", breaker: "closed", credentials: "accepted" });
  });

  it("answers a denied client from memory until retryAfter, without a Redis call, and lets it in right after", async () => {
    const { decider } = setup();
    const call = rule({ algorithm: "token-bucket", limit: 2, burst: 2, periodMs: 2000 });
    for (let i = 0; i < 2; i++) expect((await decider.decide([call], `a${i}`)).allowed).toBe(true);
    const denied = await decider.decide([call], "d0");
    expect(denied.allowed).toBe(false);
    expect(denied.results[0]).toMatchObject({ source: "redis", outcome: "denied" });
    const retryAfterMs = denied.results[0]?.retryAfterMs ?? 0;
    expect(retryAfterMs).toBeGreaterThan(300);
    const deniedAt = Date.now();

    const callsBefore = await scriptCalls();
    let cached = 0;
    while (Date.now() - deniedAt < retryAfterMs - 60) {
      const again = await decider.decide([call], `c${cached}`);
      expect(again.allowed).toBe(false);
      expect(again.results[0]).toMatchObject({
        source: "deny-cache",
        reason: "deny_cache",
        outcome: "denied",
      });
      expect(again.results[0]?.retryAfterMs).toBeLessThanOrEqual(retryAfterMs);
      cached += 1;
      await sleep(20);
    }
    expect(cached).toBeGreaterThan(3);
    expect(await scriptCalls()).toBe(callsBefore);

    await sleep(Math.max(0, deniedAt + retryAfterMs + 5 - Date.now()));
    const after = await decider.decide([call], "after");
    expect(after.allowed).toBe(true);
    expect(after.results[0]?.source).toBe("redis");
    expect(await scriptCalls()).toBe(callsBefore + 1);
  });

  it("answers a larger cost from a cached denial only with the longer wait it needs, and none above capacity", async () => {
    const { decider } = setup();
    // 1 s a unit, burst 4; the denial is for cost 1.
    const call = rule({ algorithm: "token-bucket", limit: 10, burst: 4, periodMs: 10_000 });
    expect((await decider.decide([{ ...call, cost: 4 }], "a")).allowed).toBe(true);
    const denied = await decider.decide([call], "d");
    const oneUnitMs = denied.results[0]?.retryAfterMs ?? 0;
    expect(oneUnitMs).toBeGreaterThan(500);
    const three = await decider.decide([{ ...call, cost: 3 }], "c3");
    expect(three.results[0]).toMatchObject({ source: "deny-cache", outcome: "denied" });
    // Two units more than the denied request: two more seconds, never the one unit's wait.
    expect(three.results[0]?.retryAfterMs).toBeGreaterThanOrEqual(oneUnitMs + 2000 - 100);
    // More than the bucket can ever hold: Redis's answer (the 429 then waits one whole period).
    const tooBig = await decider.decide([{ ...call, cost: 5 }], "c5");
    expect(tooBig.results[0]).toMatchObject({ source: "redis", outcome: "cost-exceeds-capacity" });
  });

  it("answers no call under other limits from a cached denial: tiers of one limit may differ in burst", async () => {
    const { decider } = setup();
    // One identity (an address) for a pro and a free client: the pro tier's burst is 50, the rule's 10.
    const pro = rule({ algorithm: "token-bucket", limit: 10, burst: 50, periodMs: 10_000 });
    const free = { ...pro, burst: 10 };
    expect((await decider.decide([{ ...pro, cost: 50 }], "pro")).allowed).toBe(true);
    expect((await decider.decide([pro], "pro-denied")).allowed).toBe(false);
    const answer = await decider.decide([free], "free");
    expect(answer.results[0]).toMatchObject({ source: "redis", outcome: "denied" });
    expect(answer.results[0]?.retryAfterMs).toBeGreaterThan(30_000); // the free bucket is 40 s over, not 1
  });

  it("answers a larger cost under a sliding log from Redis: only it knows how soon enough requests drain", async () => {
    const { decider } = setup();
    const log = rule({ algorithm: "sliding-log", limit: 2, burst: 2, periodMs: 60_000 });
    for (let i = 0; i < 2; i++) expect((await decider.decide([log], `l${i}`)).allowed).toBe(true);
    expect((await decider.decide([log], "denied")).allowed).toBe(false);
    expect((await decider.decide([log], "same")).results[0]?.source).toBe("deny-cache");
    expect((await decider.decide([{ ...log, cost: 2 }], "more")).results[0]?.source).toBe("redis");
  });

  it("denies from the deny cache even when other rules match too, giving them the figures Redis gave with the denial", async () => {
    const { decider } = setup();
    const strict = rule({ algorithm: "gcra", limit: 1, burst: 1, periodMs: 5000 });
    const loose = rule({ limit: 100, burst: 100 });
    expect((await decider.decide([strict, loose], "first")).allowed).toBe(true);
    const denied = await decider.decide([strict, loose], "second");
    expect(denied.allowed).toBe(false);
    const callsBefore = await scriptCalls();
    const cached = await decider.decide([strict, loose], "third");
    expect(await scriptCalls()).toBe(callsBefore);
    expect(cached.allowed).toBe(false);
    expect(cached.results[0]).toMatchObject({ source: "deny-cache", outcome: "denied" });
    // Redis's figures for the loose rule in the denied decision (the denial consumed nothing), not made up.
    expect(cached.results[1]).toMatchObject({
      source: "deny-cache",
      reason: "deny_cache",
      outcome: "allowed",
      limit: 100,
      remaining: 100 - 1,
    });
    expect(denied.results[1]?.remaining).toBe(100 - 1);
    expect(cached.results[1]?.resetAfterMs).toBeLessThanOrEqual(denied.results[1]?.resetAfterMs as number);
    // A rule the denied decision did not decide has no figures: it is left undecided.
    const unseen = rule({ limit: 100, burst: 100 });
    const withUnseen = await decider.decide([strict, unseen], "fourth");
    expect(withUnseen.results[1]).toMatchObject({ source: "undecided", reason: "deny_cache" });
    // A denied request consumes nothing: the loose rule was counted once, by the first request.
    const other = await setup().decider.decide([loose], "check");
    expect(other.results[0]?.remaining).toBe(100 - 2);
  });

  it("asks Redis instead of the deny cache when a fail-closed rule would be left undecided", async () => {
    const { decider } = setup();
    const strict = rule({ algorithm: "gcra", limit: 1, burst: 1, periodMs: 5000 });
    const guarded = rule({ failure: "closed", limit: 100, burst: 100 });
    await decider.decide([strict], "first");
    expect((await decider.decide([strict], "second")).results[0]?.source).toBe("redis");
    expect((await decider.decide([strict], "third")).results[0]?.source).toBe("deny-cache");
    const both = await decider.decide([strict, guarded], "both");
    expect(both.allowed).toBe(false);
    expect(both.results.map((r) => r.source)).toEqual(["redis", "redis"]);
    // That denial kept Redis's figures for the fail-closed rule: nothing is left undecided, the cache answers.
    const again = await decider.decide([strict, guarded], "again");
    expect(again.results.map((r) => r.source)).toEqual(["deny-cache", "deny-cache"]);
  });

  it("answers a request with no budget left by its failure policy, without a Redis call or a breaker failure", async () => {
    // The request already waited on Redis for as long as it may (a fresh isolate's live-mode read, a lease
    // call another request sent). A call now would still be counted by Redis, its answer thrown away.
    const { decider } = setup({ breaker: { failureThreshold: 1 } });
    // A limit large enough that the fallback's share of it while Redis is slow admits both requests.
    const open = rule({ limit: 100, burst: 100 });
    const closed = rule({ failure: "closed" });
    const callsBefore = await scriptCalls();
    for (const budgetMs of [0, -5]) {
      const decision = await decider.decide([open, closed], `spent${budgetMs}`, { budgetMs });
      expect(decision.allowed).toBe(true);
      expect(decision.results.map((r) => [r.source, r.reason])).toEqual([
        ["fallback", "timeout"],
        ["undecided", "timeout"],
      ]);
    }
    expect(await scriptCalls()).toBe(callsBefore);
    // Redis did not fail: with a threshold of one failure, the breaker would be open otherwise.
    expect(decider.health()).toMatchObject({ status: "ok", breaker: "closed" });
    expect((await decider.decide([open], "next")).results[0]?.source).toBe("redis");
  });

  it("survives SCRIPT FLUSH between every decision without a failed one", async () => {
    const { decider } = setup();
    const call = rule({ limit: 100, burst: 100 });
    for (let i = 0; i < 5; i++) {
      await direct.script("FLUSH");
      const decision = await decider.decide([call], `f${i}`);
      expect(decision.results[0]).toMatchObject({ source: "redis", remaining: 100 - 1 - i });
    }
    expect(decider.health().consecutiveFailures).toBe(0);
  });
});

/**
 * An HTTP hop in front of the run's REST server that counts what passes it (what reaches Redis). With
 * `dropAnswers` it waits for Redis's answer and then drops the connection instead of passing it on: the
 * decision was counted, but the client never hears about it. With `lagMs` it holds each call that long first.
 */
async function startForwarder({ dropAnswers = false, lagMs = 0 } = {}) {
  let forwarded = 0;
  const server = createServer(async (req, res) => {
    forwarded += 1;
    if (lagMs > 0) await sleep(lagMs); // a Redis this far away: every call takes at least this long
    if (res.destroyed) return;
    const upstream = httpRequest(
      `${rest.url}${req.url}`,
      { method: req.method, headers: req.headers },
      (up) => {
        if (dropAnswers) {
          up.resume();
          up.on("end", () => res.socket?.destroy());
          return;
        }
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    res.on("close", () => upstream.destroy()); // a client that gave up (its budget) stops waiting here too
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  return {
    url: `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`,
    forwarded: () => forwarded,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe("never counting a decision twice", () => {
  let dropper: Awaited<ReturnType<typeof startForwarder>>;
  beforeAll(async () => {
    dropper = await startForwarder({ dropAnswers: true });
  });
  afterAll(() => dropper.close());

  it("does not resend a decision whose response was lost after Redis counted it", async () => {
    const lossy = createStore({ url: dropper.url, token: rest.token, timeoutMs: 2000 });
    const { decider } = setup({ timeoutMs: 2000 }, lossy);
    const call = rule({ limit: 10, burst: 10 });
    const { decider: healthy } = setup();
    await healthy.decide([rule()], "load"); // the script is in Redis's cache: one EVALSHA does it all

    const lost = await decider.decide([call], "lost");
    expect(lost.results[0]).toMatchObject({ source: "fallback", reason: "redis_error" });
    await sleep(300); // @upstash/redis's default retries would resend after ~50 ms
    expect(dropper.forwarded()).toBe(1);

    const next = await healthy.decide([call], "next");
    expect(next.results[0]).toMatchObject({ source: "redis", remaining: 10 - 2 });
  });
});

describe("when Redis is frozen (SIGSTOP)", () => {
  let forwarder: Awaited<ReturnType<typeof startForwarder>>;
  beforeAll(async () => {
    forwarder = await startForwarder();
  });
  afterAll(() => forwarder.close());

  it("answers every decision within the budget, then opens the breaker and stops calling Redis", async () => {
    const counted = createStore({
      url: forwarder.url,
      token: rest.token,
      timeoutMs: TIMEOUT_MS,
    });
    const { decider, logs } = setup({ timeoutMs: TIMEOUT_MS }, counted);
    const call = rule();
    expect((await decider.decide([call], "warm")).results[0]?.source).toBe("redis");
    expect(forwarder.forwarded()).toBeGreaterThan(0); // this decider's calls pass the forwarder
    redis.stop();
    try {
      const durations: number[] = [];
      for (let i = 0; i < 5; i++) {
        const { decision, ms } = await timed(() => decider.decide([call], `s${i}`));
        durations.push(ms);
        expect(decision.results[0]).toMatchObject({ source: "fallback", reason: "timeout" });
      }
      expect(Math.max(...durations)).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
      expect(decider.health()).toMatchObject({ status: "degraded", breaker: "open" });
      const opened = logs.find((l) => l.includes("circuit breaker open")) ?? "";
      expect(opened).toContain("RATE_LIMIT_TIMEOUT_MS (Worker) / timeoutMs (middleware)");

      const sent = forwarder.forwarded();
      const { decision, ms } = await timed(() => decider.decide([call], "open"));
      expect(decision.results[0]).toMatchObject({ source: "fallback", reason: "breaker_open" });
      // Not sent to Redis at all (a call there would wait out the budget): nothing more reached the forwarder.
      expect(forwarder.forwarded()).toBe(sent);
      expect(ms).toBeLessThan(TIMEOUT_MS);
    } finally {
      redis.cont();
    }
    // Back within a cool-down or two (the first probe may meet the REST server's backlog from the freeze).
    const backBy = Date.now() + 12_000;
    let back: Decision;
    do {
      await sleep(decider.health().breakerRemainingMs + 10);
      back = await decider.decide([call], "back");
    } while (back.results[0]?.source !== "redis" && Date.now() < backBy);
    expect(back.results[0]?.source).toBe("redis");
    expect(decider.health()).toMatchObject({ status: "ok", breaker: "closed" });
  });
});

describe("when Redis is frozen and every call has less than the whole budget", () => {
  it("still opens the breaker: a shortened timeout is excused only while Redis answered lately", async () => {
    // Each request waited on something else first (a lease call another request sent, say): a silent Redis
    // must still trip the breaker, or every request would wait out its budget for as long as it stays silent.
    const { decider, logs } = setup({ timeoutMs: TIMEOUT_MS });
    const call = rule();
    expect((await decider.decide([call], "warm")).results[0]?.source).toBe("redis");
    redis.stop();
    try {
      for (let i = 0; i < 10 && decider.health().breaker === "closed"; i++) {
        const shortened = await decider.decide([call], `s${i}`, { budgetMs: TIMEOUT_MS - 50 });
        expect(shortened.results[0]).toMatchObject({ source: "fallback", reason: "timeout" });
      }
      expect(decider.health()).toMatchObject({ status: "degraded", breaker: "open" });
      expect(logs.some((l) => l.includes("circuit breaker open"))).toBe(true);
    } finally {
      redis.cont();
    }
    await waitUntilRestReachesRedis(rest);
  });
});

describe("when a cached denial expires", () => {
  let counter: Awaited<ReturnType<typeof startForwarder>>;
  beforeAll(async () => {
    counter = await startForwarder();
  });
  afterAll(() => counter.close());

  /** A decider whose every Redis call passes `counter`; its client denied by Redis, that denial just expired. */
  async function deniedThenExpired(call: RuleCall, timeoutMs = ROOMY_TIMEOUT_MS) {
    const store = createStore({ url: counter.url, token: rest.token, timeoutMs });
    const { decider } = setup({ timeoutMs }, store);
    for (let i = 0; i < call.limit; i++) expect((await decider.decide([call], `in${i}`)).allowed).toBe(true);
    const denied = await decider.decide([call], "out");
    expect(denied.results[0]).toMatchObject({ source: "redis", outcome: "denied" });
    expect((await decider.decide([call], "cached")).results[0]?.source).toBe("deny-cache");
    await sleep(DENY_CACHE_HOLD_MS + 20);
    return decider;
  }

  const crowd = (decider: EndpointDecider, call: RuleCall, n: number) =>
    Promise.all(Array.from({ length: n }, (_, i) => timed(() => decider.decide([call], `crowd${i}`))));

  it("asks Redis once for the decisions arriving meanwhile, and answers them with Redis's new denial", async () => {
    const call = rule({ limit: 1, burst: 1 });
    const decider = await deniedThenExpired(call);
    const sent = counter.forwarded();
    const decisions = (await crowd(decider, call, 20)).map((d) => d.decision);
    expect(counter.forwarded() - sent).toBe(1);
    expect(decisions.every((d) => !d.allowed)).toBe(true);
    expect(decisions.filter((d) => d.results[0]?.source === "redis")).toHaveLength(1);
    for (const d of decisions.slice(1)) expect(d.results[0]).toMatchObject({ source: "deny-cache" });
  });

  it("lets the decisions that waited decide themselves when Redis let the asking one through: none beyond the limit", async () => {
    const call = rule({ limit: 3, burst: 3 });
    const decider = await deniedThenExpired(call);
    // Units back in Redis that this isolate was not told of (another isolate's admin reset, a lease's return).
    expect(await direct.del(stateKey(DEFAULTS.prefix, call.rule, call.identityHash))).toBe(1);
    const sent = counter.forwarded();
    const decisions = (await crowd(decider, call, 10)).map((d) => d.decision);
    expect(decisions.filter((d) => d.allowed)).toHaveLength(3);
    // None answered by the expired denial: the one that asked, then each of the others on its own.
    expect(decisions.every((d) => d.results[0]?.source === "redis")).toBe(true);
    expect(counter.forwarded() - sent).toBe(10);
  });

  it("applies the failure policy to the decisions that waited when the asking one fails, within their budget", async () => {
    const call = rule({ limit: 1, burst: 1, failure: "closed" });
    const decider = await deniedThenExpired(call, TIMEOUT_MS);
    const sent = counter.forwarded();
    redis.stop();
    let timings: { decision: Decision; ms: number }[];
    try {
      timings = await crowd(decider, call, 10);
    } finally {
      redis.cont();
    }
    for (const { decision, ms } of timings) {
      expect(decision.results[0]).toMatchObject({ source: "undecided", reason: "timeout" });
      expect(ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    }
    expect(counter.forwarded() - sent).toBe(1);
    // One failed call, one failure for the breaker: the waiting decisions sent none.
    expect(decider.health().consecutiveFailures).toBe(1);
    // The expired denial is gone: the next decision asks Redis (back from its freeze) itself.
    const next = await decider.decide([call], "next");
    expect(next.results[0]).toMatchObject({ source: "redis", outcome: "denied" });
  });
});

describe("when a cached denial expires behind a slow Redis", () => {
  const LAG_MS = 150;
  let slow: Awaited<ReturnType<typeof startForwarder>>;
  beforeAll(async () => {
    slow = await startForwarder({ lagMs: LAG_MS });
  });
  afterAll(() => slow.close());

  it("does not open the breaker when the decisions that waited run out of budget on their own calls", async () => {
    // Each call takes over 150 ms of a 250 ms budget: the one asking about the expired denial is let through,
    // and the others, having waited for it, have too little budget left for a call of their own.
    const timeoutMs = 250;
    const store = createStore({ url: slow.url, token: rest.token, timeoutMs });
    const { decider, logs } = setup({ timeoutMs }, store);
    await setup().decider.decide([rule()], "load"); // the script is in Redis's cache: one round trip a call
    const call = rule({ limit: 1, burst: 1 });
    expect((await decider.decide([call], "in")).allowed).toBe(true);
    expect((await decider.decide([call], "out")).results[0]).toMatchObject({
      source: "redis",
      outcome: "denied",
    });
    await sleep(DENY_CACHE_HOLD_MS + 20);
    expect(await direct.del(stateKey(DEFAULTS.prefix, call.rule, call.identityHash))).toBe(1);

    const decisions = await Promise.all(
      Array.from({ length: 12 }, (_, i) => decider.decide([call], `crowd${i}`)),
    );
    const fromRedis = decisions.filter((d) => d.results[0]?.source === "redis");
    expect(fromRedis.filter((d) => d.allowed)).toHaveLength(1);
    // The others followed their failure policy: short of budget, not because Redis failed.
    const short = decisions.filter((d) => d.results[0]?.source !== "redis");
    expect(short.length).toBeGreaterThanOrEqual(5);
    for (const d of short) expect(d.results[0]).toMatchObject({ source: "fallback", reason: "timeout" });
    expect(decider.health()).toMatchObject({ breaker: "closed", consecutiveFailures: 0 });
    expect(logs.filter((l) => l.includes("circuit breaker open"))).toEqual([]);
    // The next identity is decided by Redis, not by a breaker the crowd opened. On a loaded machine one
    // call may itself run out of its 250 ms: that is a timeout of its own, never the breaker's answer.
    let next = await decider.decide([rule()], "next");
    for (let i = 0; i < 3 && next.results[0]?.reason === "timeout"; i++) {
      next = await decider.decide([rule()], "next");
    }
    expect(next.results[0]?.reason).not.toBe("breaker_open");
    expect(next.results[0]?.source).toBe("redis");
    expect(decider.health()).toMatchObject({ status: "ok", breaker: "closed" });
  });
});

describe("a store that never answers", () => {
  it("is not waited for past the budget plus the decider's grace", async () => {
    const hung: DecisionStore = { decide: () => new Promise(() => {}), release: () => new Promise(() => {}) };
    const decider = new EndpointDecider(hung, { timeoutMs: 100, guardMs: 20, log: () => {} });
    const { decision, ms } = await timed(() => decider.decide([rule()], "hung"));
    expect(decision.results[0]).toMatchObject({ source: "fallback", reason: "timeout" });
    expect(ms).toBeGreaterThanOrEqual(100);
    expect(ms).toBeLessThan(120 + MARGIN_MS);
  });
});

describe("when Redis is killed", () => {
  it("bounds fail-open rules locally, leaves fail-closed ones undecided, and resumes within one cool-down", async () => {
    const { decider } = setup();
    const open = rule({ limit: 3, burst: 3 });
    const closed = rule({ failure: "closed", limit: 100, burst: 100 });
    // Warm (the script loaded) with other identities: Redis has said nothing about `open`'s.
    await decider.decide([rule(), rule({ failure: "closed" })], "warm");
    await redis.kill();
    let reopened = false;
    try {
      const outcomes: string[] = [];
      for (let i = 0; i < 8; i++) {
        const decision = await decider.decide([open, closed], `k${i}`);
        const [o, c] = decision.results;
        expect(o?.source).toBe("fallback");
        expect(c).toMatchObject({ source: "undecided" });
        expect(c?.retryAfterMs).toBeGreaterThanOrEqual(1000);
        outcomes.push(decision.allowed ? "allowed" : "denied");
      }
      // The local window is approximate and per isolate: 3 per period here, as configured.
      expect(outcomes).toEqual(["allowed", "allowed", "allowed", ...Array(5).fill("denied")]);
      expect(decider.health().breaker).toBe("open");
      // Monitor rules are never limited by the fallback: they are left undecided.
      const watched = await decider.decide([rule({ mode: "monitor", limit: 1 })], "monitor");
      expect(watched).toMatchObject({
        allowed: true,
        results: [{ source: "undecided", reason: "breaker_open" }],
      });

      await redis.restart();
      reopened = true;
      await waitUntilRestReachesRedis(rest);
      const restartedAt = Date.now();
      const coolDownMs = decider.health().breakerRemainingMs;
      let decision: Decision;
      do {
        decision = await decider.decide([open, closed], "resume");
        if (decision.results[0]?.source !== "redis") await sleep(25);
      } while (decision.results[0]?.source !== "redis" && Date.now() - restartedAt < 12_000);
      expect(decision.results[0]?.source).toBe("redis");
      expect(Date.now() - restartedAt).toBeLessThanOrEqual(coolDownMs + 500);
      // A fresh Redis: counting starts over, the script was reloaded without a failed decision.
      expect(decision.results[0]).toMatchObject({ outcome: "allowed", remaining: 2 });
    } finally {
      if (!reopened) await redis.restart();
    }
  });
});

describe("the fallback limiter, through the decider", () => {
  it("starts from what Redis last said of an identity: nothing for one it denied, its remaining for another", async () => {
    // Redis through a forwarder this test then closes: every later call is refused at once (Redis down).
    const forwarder = await startForwarder();
    // No deny cache: the fallback's own answer to the identity Redis denied.
    const { decider } = setup(
      { denyCacheEntries: 0 },
      createStore({ url: forwarder.url, token: rest.token, timeoutMs: ROOMY_TIMEOUT_MS }),
    );
    const denied = rule({ limit: 2, burst: 2 });
    const counted = rule({ limit: 10, burst: 10 });
    for (let i = 0; i < 3; i++) await decider.decide([denied], `d${i}`);
    for (let i = 0; i < 7; i++) await decider.decide([counted], `c${i}`);
    await forwarder.close();
    const outcomes = async (call: RuleCall, n: number) => {
      const out: string[] = [];
      for (let i = 0; i < n; i++) {
        const decision = await decider.decide([call], `x${i}`);
        expect(decision.results[0]?.source).toBe("fallback");
        out.push(decision.allowed ? "allowed" : "denied");
      }
      return out;
    };
    expect(await outcomes(denied, 2)).toEqual(["denied", "denied"]);
    // Redis left 3 of 10: not the whole limit again.
    expect(await outcomes(counted, 4)).toEqual(["allowed", "allowed", "allowed", "denied"]);
  });

  it("keeps a concurrency rule's requests in flight within its slots while Redis cannot answer, freed on release", async () => {
    const dead = createStore({ url: "http://127.0.0.1:9", token: "t", timeoutMs: ROOMY_TIMEOUT_MS });
    const { decider } = setup({}, dead);
    const slots = rule({ algorithm: "concurrency", limit: 2, periodMs: 60_000 });
    const first = await decider.decide([slots], "s1");
    const second = await decider.decide([slots], "s2");
    const third = await decider.decide([slots], "s3");
    expect([first, second, third].map((d) => [d.results[0]?.source, d.allowed])).toEqual([
      ["fallback", true],
      ["fallback", true],
      ["fallback", false],
    ]);
    await decider.release(slots, "s1");
    expect((await decider.decide([slots], "s4")).allowed).toBe(true);
  });
});

describe("with a wrong token", () => {
  it("logs the problem once without the token, reports it in health and applies the failure policy", async () => {
    const token = "wrong-token-3f9a1c7e5b";
    const badStore = createStore({ url: rest.url, token, timeoutMs: ROOMY_TIMEOUT_MS });
    const { decider, logs } = setup({}, badStore);
    const open = rule();
    const closed = rule({ failure: "closed" });
    for (let i = 0; i < 3; i++) {
      const decision = await decider.decide([open, closed], `w${i}`);
      expect(decision.results[0]).toMatchObject({ source: "fallback", reason: "auth" });
      expect(decision.results[1]).toMatchObject({ source: "undecided", reason: "auth" });
    }
    const authLines = logs.filter((l) => l.includes("UPSTASH_REDIS_REST_TOKEN"));
    expect(authLines).toHaveLength(1);
    expect(authLines[0]).toContain("401");
    expect(authLines[0]).toContain("redis.token (middleware)"); // what a rateLimit() user sets instead
    for (const line of logs) expect(line).not.toContain(token);
    const health = decider.health();
    expect(health).toMatchObject({ status: "degraded", credentials: "rejected" });
    expect(JSON.stringify(health)).not.toContain(token);
  });
});
