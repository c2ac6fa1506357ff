// Counting failed logins across TWO Worker instances (the bundled Worker, each in its own Miniflare/workerd)
// in front of the run's one Redis and the echo origin, whose `/login` answers 401 unless the password is right
// (docs/counting.md): a request holds its unit while in flight, a 401 keeps it, a 200 gives it back, so no
// more than `limit` attempts are answered 401 in a window however the attempts are spread over the fleet.
import { describe, expect, it } from "vitest";
import { hashIdentity, stateKey } from "../../src/engine/keys";
import { useWorkers, type Worker } from "../support/workers";

const LIMIT = 5;
const HOUR_MS = 3_600_000;
const RULES = [
  {
    name: "login",
    match: { methods: ["POST"], path: "/login" },
    key: "header:x-user",
    algorithm: "fixed-window",
    limit: LIMIT,
    period: "1h",
    count: { status: ["401"] },
  },
  {
    name: "origin-errors",
    match: { path: "/slow" },
    key: "header:x-user",
    algorithm: "sliding-window",
    limit: 2,
    period: "1h",
    count: { status: ["502", "504"] },
  },
];

const fleet = useWorkers({
  name: "count-login",
  bindings: { ORIGIN_TIMEOUT_MS: "1000", RATE_LIMIT_RULES: RULES, RATE_LIMIT_TIMEOUT_MS: "5000" },
});
const { workers, prefix } = fleet;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Redis's clock, ms. */
const redisNow = async () => {
  const [s, us] = await fleet.direct.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
};

/**
 * Away from both edges of the hour-long window: its end must not fall mid-test, and a request decided in
 * its first seconds gives nothing back (its refund may not tell it from the window before: docs/counting.md).
 */
async function midWindow(): Promise<void> {
  const into = (await redisNow()) % HOUR_MS;
  if (into < 10_000) await sleep(10_000 - into);
  else if (HOUR_MS - into < 30_000) await sleep(HOUR_MS - into + 10_000);
}

/** `user`'s counter under `rule` in Redis, 0 when none. */
async function counted(rule: string, user: string): Promise<number> {
  return Number((await fleet.direct.get(stateKey(prefix, rule, await hashIdentity(user)))) ?? 0);
}

/** Waits until `user`'s counter reads `expected` (the give-backs land in the background), or 10 s passed. */
async function settlesAt(rule: string, user: string, expected: number): Promise<number> {
  const until = Date.now() + 10_000;
  let now = await counted(rule, user);
  while (now !== expected && Date.now() < until) {
    await sleep(50);
    now = await counted(rule, user);
  }
  return now;
}

const attempt = (i: number, user: string, password: string) =>
  (workers[i % 2] as Worker).fetch("/login", {
    method: "POST",
    headers: { "x-user": user, "x-password": password },
  });

describe("count = { status = ['401'] } across two Worker instances", () => {
  it("50 concurrent logins, 40 wrong: at most 5 answered 401, the 200s' units given back, Redis counts the 401s", async () => {
    await midWindow();
    const user = `u-${crypto.randomUUID()}`;
    // A correct attempt alone: let in, answered 200, its unit given back.
    expect((await attempt(0, user, "correct horse")).status).toBe(200);
    expect(await fleet.direct.exists(stateKey(prefix, "login", await hashIdentity(user)))).toBe(1);
    expect(await settlesAt("login", user, 0)).toBe(0);

    const wrong = (i: number) => i % 5 !== 0; // 40 wrong, 10 right, interleaved over both instances
    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) => attempt(i, user, wrong(i) ? "hunter2" : "correct horse")),
    );
    const statuses = responses.map((r) => r.status);
    await Promise.all(responses.map((r) => r.arrayBuffer()));
    statuses.forEach((status, i) => {
      expect(wrong(i) ? [401, 429] : [200, 429]).toContain(status);
    });
    const failed = statuses.filter((s) => s === 401).length;
    expect(failed).toBeGreaterThan(0);
    expect(failed).toBeLessThanOrEqual(LIMIT);
    // Every 200's unit came back; every 401's stayed: the counter is exactly the 401s.
    expect(await settlesAt("login", user, failed)).toBe(failed);

    // While room is left, a correct attempt is always let in and answered 200, and gives its unit back.
    for (let i = failed; i < LIMIT; i++) {
      for (const w of [0, 1]) {
        expect((await attempt(w, user, "correct horse")).status).toBe(200);
        expect(await settlesAt("login", user, i)).toBe(i);
      }
      expect((await attempt(i, user, "hunter2")).status).toBe(401);
      expect(await settlesAt("login", user, i + 1)).toBe(i + 1);
    }
    // Five failures in the window: no more attempts, right or wrong, on either instance, until its end.
    for (const w of [0, 1]) {
      const denied = await attempt(w, user, "correct horse");
      expect(denied.status).toBe(429);
      const retryAfter = Number(denied.headers.get("Retry-After"));
      const left = (HOUR_MS - ((await redisNow()) % HOUR_MS)) / 1000;
      expect(Math.abs(retryAfter - left)).toBeLessThanOrEqual(2);
    }
    expect(await counted("login", user)).toBe(LIMIT);
  }, 90_000);

  it("lets correct attempts in only while a unit is free, and each gives it back", async () => {
    await midWindow();
    const user = `u-${crypto.randomUUID()}`;
    for (let i = 0; i < LIMIT - 2; i++) expect((await attempt(i, user, "hunter2")).status).toBe(401);
    expect(await settlesAt("login", user, LIMIT - 2)).toBe(LIMIT - 2);
    // Two units free: ten correct attempts at once, over both instances; at most two in flight at a time.
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, i) => attempt(i, user, "correct horse")),
    );
    const statuses = responses.map((r) => r.status);
    expect(statuses.every((s) => s === 200 || s === 429)).toBe(true);
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(2);
    expect(await settlesAt("login", user, LIMIT - 2)).toBe(LIMIT - 2);
  }, 90_000);

  it("counts Floodgate's own 504 as a 504: charged, while the origin's 200 is given back", async () => {
    await midWindow();
    const user = `u-${crypto.randomUUID()}`;
    const slow = (i: number, ms: number) =>
      (workers[i % 2] as Worker).fetch(`/slow?ms=${ms}`, { headers: { "x-user": user } });
    for (let i = 0; i < 4; i++) {
      const fast = await slow(i, 0);
      expect(fast.status).toBe(200);
      await fast.arrayBuffer();
    }
    // The origin answers after 1.5 s; ORIGIN_TIMEOUT_MS is 1 s: 504, twice, and the rule is full.
    for (let i = 0; i < 2; i++) {
      const timedOut = await slow(i, 1500);
      expect(timedOut.status).toBe(504);
      await timedOut.arrayBuffer();
    }
    await sleep(300); // the 200s' give-backs and the 504s' (none) in the background
    const denied = await slow(0, 0);
    expect(denied.status).toBe(429);
    await denied.arrayBuffer();
  }, 90_000);
});
