// The real Worker (bundled as for deploy, run in Miniflare/workerd) in front of this file's own redis-server,
// REST server and echo origin. The tests kill, freeze, flush and restart Redis, give the Worker a wrong
// token and a dead or slow origin, and check what a client of the API would see.
import { describe, expect, it } from "vitest";
import { freePort } from "../../redis-rest/index.mjs";
import { startWorker } from "../support/miniflare-worker.mjs";
import { waitUntilRestReachesRedis } from "../support/rest-ready";
import { useWorkers, type Worker } from "../support/workers";

/**
 * The decision budget (RATE_LIMIT_TIMEOUT_MS): well above the default 200, because this machine is shared
 * and busy and the counting assertions need every healthy decision to come from Redis.
 */
const TIMEOUT_MS = 1000;
/** Worker + origin + a shared 2-core machine, on top of the decision budget. */
const MARGIN_MS = 400;

// Fixed windows of an hour, not a minute: tests count requests over several calls (in Redis, or in the
// fallback's local window, aligned the same way), and a minute's edge would fall between them now and then.
const RULES = [
  {
    name: "open-rule",
    match: { path: "/open/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 5,
    period: "1h",
  },
  {
    name: "closed-rule",
    match: { path: "/closed/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 100,
    period: "1h",
    failure: "closed",
  },
  { name: "deny-rule", match: { path: "/deny/*" }, key: "ip", algorithm: "gcra", limit: 2, period: "2s" },
  {
    name: "origin-rule",
    match: { path: "/status/*" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 10,
    period: "1h",
  },
  {
    name: "slow-rule",
    match: { path: "/slow" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 10,
    period: "1h",
  },
];

// The file's own stack: its tests kill, freeze, flush and restart that Redis.
const fleet = useWorkers({
  name: "resw",
  count: 1,
  ownStack: true,
  bindings: {
    RATE_LIMIT_RULES: JSON.stringify(RULES),
    RATE_LIMIT_TIMEOUT_MS: String(TIMEOUT_MS),
    ORIGIN_TIMEOUT_MS: "1500",
  },
});
const worker = fleet.handle(0);
const bindings = fleet.bindings;
let ipSeq = 0;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A client address no other request in this file uses. */
const freshIp = () => `198.51.${Math.floor(++ipSeq / 250)}.${(ipSeq % 250) + 1}`;

async function send(w: Worker, path: string, ip: string) {
  const started = performance.now();
  const response = await w.fetch(path, { headers: { "CF-Connecting-IP": ip } });
  const body = await response.text();
  return { status: response.status, headers: response.headers, body, ms: performance.now() - started };
}

async function health(w: Worker) {
  const response = await w.fetch("/__floodgate/health");
  const text = await response.text();
  return { status: response.status, text, json: JSON.parse(text) as Record<string, unknown> };
}

/** EVALSHA + EVAL calls Redis has served since it (re)started. */
/**
 * Script calls Redis ran. An `EVALSHA` refused with NOSCRIPT (a script this Redis has not seen since it started or
 * was flushed: the decision is then sent again as `EVAL`, src/engine/redis.ts) ran nothing: not counted.
 */
async function scriptCalls(): Promise<number> {
  const info = await fleet.direct.info("commandstats");
  let calls = 0;
  for (const match of info.matchAll(
    /^cmdstat_(evalsha|eval):calls=(\d+).*?(?:,rejected_calls=(\d+))?(?:,failed_calls=(\d+))?$/gm,
  )) {
    calls += Number(match[2]) - Number(match[3] ?? 0) - Number(match[4] ?? 0);
  }
  return calls;
}

/** Sends requests until a decision reaches Redis again (breaker closed); returns how long that took. */
async function recover(): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < 15_000) {
    await send(worker, "/open/recover", freshIp());
    if ((await health(worker)).json.breaker === "closed") return Date.now() - started;
    await sleep(50);
  }
  throw new Error("the breaker never closed again");
}

describe("Redis killed mid-run", () => {
  it("keeps proxying fail-open rules with zero 5xx, answers fail-closed ones 503, and resumes limiting within one cool-down", async () => {
    expect((await send(worker, "/open/warm", freshIp())).status).toBe(200);
    await fleet.stack.redis.kill();
    let restarted = false;
    try {
      const batch = await Promise.all(
        Array.from({ length: 30 }, (_, i) => send(worker, `/open/${i}`, freshIp())),
      );
      expect(batch.map((r) => r.status)).toEqual(Array(30).fill(200));
      const more = [];
      for (let i = 0; i < 10; i++) more.push(await send(worker, `/open/seq${i}`, freshIp()));
      expect(more.filter((r) => r.status >= 500)).toEqual([]);

      // The local fallback limiter still bounds one client: 5 per hour here, approximately (per isolate).
      const heavy = freshIp();
      const local = [];
      for (let i = 0; i < 7; i++) local.push(await send(worker, "/open/heavy", heavy));
      expect(local.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 429, 429]);
      expect(Number(local[5]?.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);

      const closed = await send(worker, "/closed/x", freshIp());
      expect(closed.status).toBe(503);
      expect(closed.headers.get("content-type")).toContain("application/problem+json");
      expect(closed.headers.get("cache-control")).toContain("no-store");
      expect(Number(closed.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      const problem = JSON.parse(closed.body);
      expect(problem.type).toBe("https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
      expect(problem.retry_after).toBeGreaterThanOrEqual(1);

      const h = await health(worker);
      expect(h.status).toBe(200);
      expect(h.json).toMatchObject({ status: "degraded", breaker: "open" });

      await fleet.stack.redis.restart();
      restarted = true;
      await waitUntilRestReachesRedis(fleet.stack.rest);
      const coolDownMs = Number((await health(worker)).json.breakerRemainingMs);
      expect(await recover()).toBeLessThanOrEqual(coolDownMs + 1000);

      // Limiting is back: a fresh client gets its 5, then 429.
      const ip = freshIp();
      const statuses = [];
      for (let i = 0; i < 6; i++) statuses.push((await send(worker, "/open/limited", ip)).status);
      expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
    } finally {
      if (!restarted) await fleet.stack.redis.restart();
    }
  });
});

describe("Redis frozen with SIGSTOP", () => {
  it("answers every request within the budget plus a small margin, and the breaker opens", async () => {
    await recover();
    fleet.stack.redis.stop();
    const responses = [];
    try {
      for (let i = 0; i < 10; i++) responses.push(await send(worker, `/open/frozen${i}`, freshIp()));
      // By the time health answers the cool-down may have run out (half-open): either way, not closed.
      const h = await health(worker);
      expect(h.json.status).toBe("degraded");
      expect(["open", "half-open"]).toContain(h.json.breaker);
    } finally {
      fleet.stack.redis.cont();
    }
    expect(responses.map((r) => r.status)).toEqual(Array(10).fill(200));
    expect(Math.max(...responses.map((r) => r.ms))).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    // Once open, requests no longer wait for Redis at all.
    const lastThree = responses.slice(-3).map((r) => r.ms);
    expect(Math.max(...lastThree)).toBeLessThan(TIMEOUT_MS);
    await recover();
  });

  it("keeps a fresh isolate's first request (live-mode read + decision) within one budget", async () => {
    const fresh = await startWorker({ bindings: bindings() });
    fleet.stack.redis.stop();
    try {
      const first = await send(fresh, "/open/cold", freshIp());
      expect(first.status).toBe(200);
      // Both Redis waits share RATE_LIMIT_TIMEOUT_MS: not one budget for each.
      expect(first.ms).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
    } finally {
      fleet.stack.redis.cont();
      await fresh.dispose();
    }
    await recover();
  });
});

describe("script cache loss", () => {
  it("loses no request to SCRIPT FLUSH between requests or to a redis-server restart", async () => {
    await recover();
    const ip = freshIp();
    const statuses: number[] = [];
    const remaining: string[] = [];
    for (let i = 0; i < 4; i++) {
      await fleet.direct.script("FLUSH");
      const r = await send(worker, "/status/200", ip);
      statuses.push(r.status);
      remaining.push(r.headers.get("x-ratelimit-remaining") ?? "missing");
    }
    expect(statuses).toEqual([200, 200, 200, 200]);
    expect(remaining).toEqual(["9", "8", "7", "6"]);

    await fleet.stack.redis.restart();
    await waitUntilRestReachesRedis(fleet.stack.rest);
    const after = await send(worker, "/status/200", ip);
    expect(after.status).toBe(200);
    // A fresh Redis: counting starts over, and the script was loaded again without a failed request.
    expect(after.headers.get("x-ratelimit-remaining")).toBe("9");
  });
});

describe("deny cache", () => {
  it("answers a denied client without calling Redis until Retry-After, with the same headers, then lets it in", async () => {
    await recover();
    // Leases of earlier tests expire within a second and are returned by the next request (docs/leases.md):
    // let that happen first, so that only this test's decisions are counted below.
    await sleep(1100);
    await send(worker, "/open/sweep", freshIp());
    await sleep(300);
    const ip = freshIp();
    expect((await send(worker, "/deny/x", ip)).status).toBe(200);
    expect((await send(worker, "/deny/x", ip)).status).toBe(200);
    const denied = await send(worker, "/deny/x", ip);
    const deniedAt = Date.now();
    expect(denied.status).toBe(429);
    const retryAfterS = Number(denied.headers.get("retry-after"));
    expect(retryAfterS).toBeGreaterThanOrEqual(1);

    const before = await scriptCalls();
    const cached = [];
    while (Date.now() - deniedAt < 500) {
      cached.push(await send(worker, "/deny/x", ip));
      await sleep(25);
    }
    expect(cached.length).toBeGreaterThan(3);
    for (const r of cached) {
      expect(r.status).toBe(429);
      expect(r.headers.get("ratelimit-policy")).toBe(denied.headers.get("ratelimit-policy"));
      expect(r.headers.get("retry-after")).toBe(denied.headers.get("retry-after"));
      expect(r.headers.get("ratelimit")).toBeTruthy();
    }
    expect(await scriptCalls()).toBe(before);

    await sleep(Math.max(0, deniedAt + retryAfterS * 1000 + 50 - Date.now()));
    const after = await send(worker, "/deny/x", ip);
    expect(after.status).toBe(200);
    expect(await scriptCalls()).toBe(before + 1);
  });
});

describe("the origin fails", () => {
  it("answers 504 for an origin slower than ORIGIN_TIMEOUT_MS, and the request stays counted", async () => {
    const ip = freshIp();
    const first = await send(worker, "/slow?ms=0", ip);
    expect(first.headers.get("x-ratelimit-remaining")).toBe("9");
    const slow = await send(worker, "/slow?ms=5000", ip);
    expect(slow.status).toBe(504);
    expect(slow.headers.get("content-type")).toContain("application/problem+json");
    expect(slow.ms).toBeLessThan(4000);
    const next = await send(worker, "/slow?ms=0", ip);
    expect(next.status).toBe(200);
    expect(next.headers.get("x-ratelimit-remaining")).toBe("7");
  });

  it("answers 502 when the origin is unreachable, and the request stays counted", async () => {
    const closedPort = await freePort(); // nothing listens there
    const dead = await startWorker({ bindings: bindings({ ORIGIN_URL: `http://127.0.0.1:${closedPort}` }) });
    try {
      const ip = freshIp();
      const first = await send(dead, "/status/200", ip);
      expect(first.status).toBe(502);
      expect(first.headers.get("content-type")).toContain("application/problem+json");
      expect((await send(dead, "/status/200", ip)).status).toBe(502);
      // Same Redis, same prefix: the healthy Worker sees both requests counted.
      const via = await send(worker, "/status/200", ip);
      expect(via.headers.get("x-ratelimit-remaining")).toBe("7");
    } finally {
      await dead.dispose();
    }
  });
});

describe("a wrong Upstash URL", () => {
  it("applies the failure policy, reports degraded health and logs which binding to check", async () => {
    // An HTTP server that is not a Redis REST endpoint at all (the echo origin answers JSON without `result`).
    const wrong = await startWorker({
      bindings: bindings({ UPSTASH_REDIS_REST_URL: `${fleet.stack.origin.url}/not-redis` }),
    });
    try {
      const open = [];
      for (let i = 0; i < 6; i++) open.push((await send(wrong, "/open/x", freshIp())).status);
      expect(open).toEqual(Array(6).fill(200));
      expect((await send(wrong, "/closed/x", freshIp())).status).toBe(503);
      const h = await health(wrong);
      expect(h.json).toMatchObject({ status: "degraded", breaker: "open" });
      expect(wrong.logs.some((line: string) => line.includes("UPSTASH_REDIS_REST_URL"))).toBe(true);
      for (const line of wrong.logs) expect(line).not.toContain(fleet.stack.rest.token);
    } finally {
      await wrong.dispose();
    }
  });
});

describe("a wrong Upstash token", () => {
  it("applies the failure policy, says so in health, and never shows the token", async () => {
    const token = "wrong-token-e1f2a3b4c5d6";
    const wrong = await startWorker({ bindings: bindings({ UPSTASH_REDIS_REST_TOKEN: token }) });
    try {
      const seen: string[] = [];
      const record = (r: { status: number; headers: Headers; body: string }) => {
        seen.push(r.body, JSON.stringify([...r.headers]));
        return r;
      };
      expect(record(await send(wrong, "/open/x", freshIp())).status).toBe(200);
      expect(record(await send(wrong, "/closed/x", freshIp())).status).toBe(503);
      const h = await health(wrong);
      seen.push(h.text);
      expect(h.json.status).toBe("degraded");
      expect(h.text).toContain("rejected");
      expect(wrong.logs.some((line: string) => line.includes("UPSTASH_REDIS_REST_TOKEN"))).toBe(true);
      for (const text of [...seen, ...wrong.logs]) expect(text).not.toContain(token);
    } finally {
      await wrong.dispose();
    }
  });
});
