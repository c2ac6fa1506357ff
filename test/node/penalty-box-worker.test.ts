// The penalty box (a rule's `block`, docs/protect.md) through two separate Worker instances (each its own
// workerd, bundled as for deploy) sharing the run's redis-server through the REST server: a denial in one
// keeps the identity out of both for the whole block, its window's reset notwithstanding, answered from each
// isolate's deny cache after its first Redis call; an admin reset lifts it in both; monitor only logs it.
import { describe, expect, it } from "vitest";
import { blockKey, hashIdentity } from "../../src/engine/keys";
import { startWorker } from "../support/miniflare-worker.mjs";
import { useWorkers, type Worker } from "../support/workers";

const TOKEN = "penalty-box-admin-token";
const BLOCK_S = 3;
/** Worker + REST server + a shared 2-core machine: how far from a block's edge a request is sent. */
const MARGIN_MS = 400;
const COUNTING = ["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"] as const;

const RULES = [
  // Two a second, and a third within the second blocks the client for 3 s.
  ...COUNTING.map((algorithm) => ({
    name: `login-${algorithm}`,
    match: { path: `/${algorithm}` },
    key: "ip",
    algorithm,
    limit: 2,
    period: "1s",
    block: `${BLOCK_S}s`,
  })),
  {
    name: "long",
    match: { path: "/long" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 10,
    period: "1h",
    block: "1h",
  },
  { name: "plain", match: { path: "/plain" }, key: "ip", algorithm: "fixed-window", limit: 1, period: "1h" },
  {
    name: "watched",
    match: { path: "/watched" },
    key: "ip",
    algorithm: "fixed-window",
    limit: 1,
    period: "1h",
    block: "15m",
    mode: "monitor",
  },
];

const fleet = useWorkers({
  name: "penalty",
  bindings: {
    RATE_LIMIT_RULES: RULES,
    RATE_LIMIT_ADMIN_TOKEN: TOKEN,
    RATE_LIMIT_TIMEOUT_MS: "1000",
    // Leases on (the default), so that a lease, were one granted, would admit a blocked client.
    RATE_LIMIT_LEASES: "on",
  },
});
const PREFIX = fleet.prefix;
const [a, b] = [fleet.handle(0), fleet.handle(1)];
let ipSeq = 0;
const nextIp = () => `198.51.100.${++ipSeq}`;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

interface Answer {
  status: number;
  retryAfter: number | undefined;
  /** The `t` of the rule's RateLimit member. */
  t: number | undefined;
  fromCache: boolean;
  sentAt: number;
  answeredAt: number;
}

async function send(worker: Worker, path: string, ip: string): Promise<Answer> {
  const sentAt = Date.now();
  const response = await worker.fetch(path, { headers: { "CF-Connecting-IP": ip } });
  await response.text();
  const retryAfter = response.headers.get("Retry-After");
  const t = /;t=(\d+)/.exec(response.headers.get("RateLimit") ?? "")?.[1];
  return {
    status: response.status,
    retryAfter: retryAfter === null ? undefined : Number(retryAfter),
    t: t === undefined ? undefined : Number(t),
    fromCache: /desc="deny_cache"/.test(response.headers.get("Server-Timing") ?? ""),
    sentAt,
    answeredAt: Date.now(),
  };
}

const admin = (worker: Worker, method: string, path: string) =>
  worker.fetch(`/__floodgate${path}`, { method, headers: { Authorization: `Bearer ${TOKEN}` } });

describe.each(COUNTING)('a %s rule with block = "3s"', (algorithm) => {
  it("keeps a client that went over 429 in both instances for the whole block, its window's reset notwithstanding, then admits it", async () => {
    const ip = nextIp();
    const path = `/${algorithm}`;
    expect((await send(a, path, ip)).status).toBe(200);
    // Over the rate: two a second (a window's edge may fall between two requests, so maybe a few more).
    let tripped = await send(a, path, ip);
    for (let i = 0; i < 6 && tripped.status === 200; i++) tripped = await send(a, path, ip);
    expect(tripped.status).toBe(429);
    // The block's end, not the window's (1 s): Retry-After and the RateLimit member's t alike.
    expect(tripped.retryAfter).toBe(BLOCK_S);
    expect(tripped.t).toBe(BLOCK_S);

    // Through the block (three windows of 1 s, each reset long before the block's end): in A from the start,
    // in B from its second half on, whose first request (a denial in Redis) must not extend it.
    const answers: { worker: "a" | "b"; answer: Answer }[] = [];
    while (Date.now() < tripped.sentAt + BLOCK_S * 1000 - MARGIN_MS) {
      answers.push({ worker: "a", answer: await send(a, path, ip) });
      if (Date.now() > tripped.answeredAt + 1500)
        answers.push({ worker: "b", answer: await send(b, path, ip) });
      await sleep(100);
    }
    const late = answers.filter(({ answer }) => answer.sentAt > tripped.answeredAt + 1500);
    expect(late.some(({ worker }) => worker === "a")).toBe(true);
    expect(late.some(({ worker }) => worker === "b")).toBe(true);
    for (const { answer } of answers) {
      expect(answer.status).toBe(429);
      // Counted down to the block's end, never extended by the denials during it.
      expect(answer.retryAfter).toBeGreaterThanOrEqual(1);
      expect(answer.retryAfter).toBeLessThanOrEqual(BLOCK_S);
      expect(answer.sentAt + (answer.retryAfter ?? 0) * 1000).toBeLessThanOrEqual(
        tripped.answeredAt + BLOCK_S * 1000 + 1000,
      );
    }
    // A blocked client costs each isolate one Redis call: B's first; every other answer is its deny cache's.
    const fromRedis = answers.filter(({ answer }) => !answer.fromCache);
    expect(fromRedis.map(({ worker }) => worker)).toEqual(["b"]);

    await sleep(tripped.answeredAt + BLOCK_S * 1000 + MARGIN_MS - Date.now());
    expect((await send(a, path, ip)).status).toBe(200);
    expect((await send(b, path, ip)).status).toBe(200);
  });
});

it("never lets a lease admit a blocked client: a denial in one instance ends the other's admissions at once", async () => {
  const ip = nextIp();
  // Five in A: hot enough that a leasable rule would have leased it units ahead; then B until it is denied
  // (sooner, were units held on lease in A).
  for (let i = 0; i < 5; i++) expect((await send(a, "/long", ip)).status).toBe(200);
  let tripped = await send(b, "/long", ip);
  for (let i = 0; i < 10 && tripped.status === 200; i++) tripped = await send(b, "/long", ip);
  expect(tripped.status).toBe(429);
  expect(tripped.retryAfter).toBe(3600);
  for (let i = 0; i < 5; i++) expect((await send(a, "/long", ip)).status).toBe(429);
});

it("is lifted in both instances by an admin reset, and the admin API shows it until then", async () => {
  const ip = nextIp();
  for (let i = 0; i < 10; i++) expect((await send(a, "/long", ip)).status).toBe(200);
  expect((await send(a, "/long", ip)).status).toBe(429);
  const first = await send(b, "/long", ip);
  expect(first.status).toBe(429);
  expect(first.retryAfter).toBeGreaterThan(3500);
  // Both isolates now answer from their deny caches.
  expect((await send(a, "/long", ip)).fromCache).toBe(true);
  expect((await send(b, "/long", ip)).fromCache).toBe(true);

  const state = (await (await admin(b, "GET", `/keys/long/${ip}`)).json()) as {
    allowed: boolean;
    retry_after: number;
    block: { for: string; left: number };
  };
  expect(state.allowed).toBe(false);
  expect(state.block.for).toBe("1h");
  expect(state.block.left).toBeGreaterThan(3500);
  expect(state.retry_after).toBe(state.block.left);
  expect(await fleet.direct.pttl(blockKey(PREFIX, "long", await hashIdentity(ip)))).toBeGreaterThan(
    3_500_000,
  );
  // Listed among the rule's blocked identities, hashed, with its time left (what the dashboard would show).
  const listed = (await (await admin(a, "GET", "/blocks/long")).json()) as {
    block: string;
    blocked: { identity: string; left: number }[];
  };
  expect(listed.block).toBe("1h");
  const shown = `hash:${await hashIdentity(ip)}`;
  const mine = listed.blocked.find((entry) => entry.identity === shown);
  expect(mine?.left).toBeGreaterThan(3500);

  const reset = await admin(a, "DELETE", `/keys/long/${ip}`);
  expect(reset.status).toBe(200);
  expect(await reset.json()).toMatchObject({ reset: true, block_lifted: true });
  expect(await fleet.direct.exists(blockKey(PREFIX, "long", await hashIdentity(ip)))).toBe(0);
  // At once where it was reset; in the other instance once its change-log read comes round (about a second).
  expect((await send(a, "/long", ip)).status).toBe(200);
  const until = Date.now() + 3000;
  let other = await send(b, "/long", ip);
  while (other.status === 429 && Date.now() < until) {
    await sleep(100);
    other = await send(b, "/long", ip);
  }
  expect(other.status).toBe(200);

  const after = (await (await admin(a, "GET", `/keys/long/${ip}`)).json()) as { block: { left: number } };
  expect(after.block.left).toBe(0);
  const relisted = (await (await admin(a, "GET", "/blocks/long")).json()) as {
    blocked: { identity: string }[];
  };
  expect(relisted.blocked.map((entry) => entry.identity)).not.toContain(shown);
  // A rule without a block has no list.
  expect((await admin(a, "GET", "/blocks/plain")).status).toBe(400);
  const none = await b.fetch("/__floodgate/blocks/nope", { headers: { Authorization: `Bearer ${TOKEN}` } });
  expect(none.status).toBe(404);
});

it("in monitor mode logs would_block and never blocks", async () => {
  const ip = nextIp();
  const logged = a.logs.length;
  for (let i = 0; i < 4; i++) expect((await send(a, "/watched", ip)).status).toBe(200);
  const lines = a.logs.slice(logged).filter((line) => line.includes('"watched"'));
  expect(lines.length).toBe(3);
  for (const line of lines) {
    const entry = JSON.parse(line) as {
      event: string;
      rules: { verdict: string; would_block?: boolean; block_ms?: number }[];
    };
    expect(entry.event).toBe("ratelimit.would_deny");
    expect(entry.rules[0]).toMatchObject({ verdict: "would-deny", would_block: true, block_ms: 900_000 });
  }
  expect(await fleet.direct.exists(blockKey(PREFIX, "watched", await hashIdentity(ip)))).toBe(0);
});

describe("a rule's block that cannot be", () => {
  const refused = async (rule: Record<string, unknown>): Promise<string> => {
    const broken = await startWorker({
      bindings: fleet.bindings({ RATE_LIMIT_RULES: [{ name: "r", key: "ip", limit: 5, ...rule }] }),
    });
    try {
      const response = await broken.fetch("/x");
      expect(response.status).toBe(500);
      return ((await response.json()) as { detail: string }).detail;
    } finally {
      await broken.dispose();
    }
  };

  it("is a config error naming the field: on concurrency and shed, or outside 1s..30d", async () => {
    expect(await refused({ algorithm: "concurrency", block: "1m" })).toContain(
      "RATE_LIMIT_RULES[0].block: only a rule that counts (fixed-window, sliding-window, sliding-log, token-bucket and gcra) can block an identity",
    );
    expect(
      await refused({ algorithm: "shed", block: "1m", priority: "method", priorities: { GET: 1 } }),
    ).toContain("RATE_LIMIT_RULES[0].block: only a rule that counts");
    expect(await refused({ algorithm: "fixed-window", period: "1m", block: "31d" })).toContain(
      'RATE_LIMIT_RULES[0].block: "31d" is outside 1s..30d',
    );
    expect(await refused({ algorithm: "fixed-window", period: "1m", block: "soon" })).toContain(
      'RATE_LIMIT_RULES[0].block: "soon" is not a duration',
    );
  });
});
