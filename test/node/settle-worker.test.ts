// Costs settled from the response (a rule's `settle`, docs/settle.md) through TWO Worker instances (the bundled
// Worker, each in its own Miniflare/workerd) in front of the run's one Redis and the demo origin `npm start`
// uses, playing an OpenAI-compatible API (local/demo-origin.mjs): what Redis counts is what the origin billed,
// a window never holds more than its limit and one request's overshoot, and a debt denies until repaid.
import { describe, expect, it } from "vitest";
import { startDemoOrigin } from "../../local/demo-origin.mjs";
import { useWorkers, type Worker } from "../support/workers";

const PATH = "/v1/chat/completions";
const WINDOW_MS = 2000;
const LIMIT = 600;
// Each rule applies to the requests that carry its key header (`missing = "skip"` for the others).
const rule = (name: string, header: string, fields: Record<string, unknown>) => ({
  name,
  match: { path: PATH },
  key: `header:${header}`,
  missing: "skip",
  ...fields,
});
const RULES = [
  rule("tpw", "authorization", {
    algorithm: "fixed-window",
    limit: LIMIT,
    period: "2s",
    settle: "sse:usage.total_tokens",
  }),
  rule("total", "authorization", {
    algorithm: "fixed-window",
    limit: 1e9,
    period: "30d",
    settle: "sse:usage.total_tokens",
  }),
  rule("by-header", "x-h", {
    algorithm: "fixed-window",
    limit: 1e6,
    period: "1h",
    settle: "header:x-usage-total-tokens",
  }),
  rule("by-json", "x-j", {
    algorithm: "fixed-window",
    limit: 1e6,
    period: "1h",
    cost: "header:x-reserve",
    settle: "json:usage.total_tokens",
  }),
  rule("json-missing", "x-jm", {
    algorithm: "fixed-window",
    limit: 1e6,
    period: "1h",
    cost: 5,
    settle: "json:usage.no_such",
  }),
  rule("json-malformed", "x-jx", {
    algorithm: "fixed-window",
    limit: 1e6,
    period: "1h",
    cost: 5,
    settle: "json:model",
  }),
  rule("sse-missing", "x-sm", {
    algorithm: "sliding-window",
    limit: 1e6,
    period: "1h",
    cost: 5,
    settle: "sse:usage.no_such",
  }),
  rule("bucket", "x-b", {
    algorithm: "token-bucket",
    limit: 100,
    period: "10s",
    settle: "sse:usage.total_tokens",
  }),
  rule("watch", "x-w", {
    algorithm: "fixed-window",
    limit: 10,
    period: "1h",
    mode: "monitor",
    settle: "json:usage.total_tokens",
  }),
];

let origin: Awaited<ReturnType<typeof startDemoOrigin>>;
const fleet = useWorkers({
  name: "settle",
  before: async () => {
    origin = await startDemoOrigin();
  },
  after: async () => {
    await origin?.close();
  },
  bindings: () => ({ ORIGIN_URL: origin.url, RATE_LIMIT_RULES: RULES, RATE_LIMIT_TIMEOUT_MS: "5000" }),
});
const { workers, prefix } = fleet;

/** A chat completion through worker `i % 2`. */
function chat(i: number, headers: Record<string, string>, body: Record<string, unknown>): Promise<Response> {
  return (workers[i % 2] as Worker).fetch(PATH, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ messages: [{ role: "user", content: "hi there" }], ...body }),
  });
}

/** The Redis key of a rule's state for an identity (the key layout of docs/scaling-out.md). */
async function stateKey(rule: string, identity: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(identity));
  const hash = Buffer.from(new Uint8Array(digest, 0, 16)).toString("base64url");
  return `${prefix}:${rule}:{${hash}}`;
}

const counter = async (key: string) => Number((await fleet.direct.get(key)) ?? 0);

/** Waits until `read()` gives `want` (a settlement lands in the background, after the response). */
async function until(read: () => Promise<number>, want: number): Promise<number> {
  const deadline = Date.now() + 5000;
  let got = await read();
  while (got !== want && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 5));
    got = await read();
  }
  return got;
}

/** The token total of an SSE completion as its last data event states it (what the client was billed). */
function usageOf(text: string): number {
  const events = text.split("\n\n").filter((e) => e.startsWith("data: {"));
  const last = JSON.parse((events.at(-1) as string).slice(6)) as { usage: { total_tokens: number } };
  return last.usage.total_tokens;
}

describe("settle: the cost read from the response, across two Worker instances", () => {
  it("counts exactly what the origin billed over 200 streamed completions of random sizes, and never lets a window hold more than its limit and one overshoot", async () => {
    const who = `Bearer ${crypto.randomUUID()}`;
    const tpw = await stateKey("tpw", who);
    const total = await stateKey("total", who);
    const perWindow = new Map<number, number>(); // window index -> highest count seen
    let billed = 0; // what the client read in the usage events
    let largestOvershoot = 0;
    let denied = 0;
    for (let i = 0; i < 200; i++) {
      const size = 1 + Math.floor(Math.random() * 120);
      const response = await chat(i, { authorization: who }, { stream: true, max_tokens: size });
      const text = await response.text();
      if (response.status === 429) {
        denied++;
        expect(Number(response.headers.get("retry-after"))).toBeLessThanOrEqual(WINDOW_MS / 1000);
        expect(response.headers.get("ratelimit")).toMatch(/"tpw";r=0;/);
        continue;
      }
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toBe("text/event-stream");
      expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
      const tokens = usageOf(text);
      billed += tokens;
      largestOvershoot = Math.max(largestOvershoot, tokens - 1); // the reservation is the default cost, 1
      // The settlement lands in the background: the running total shows it, then the window is read.
      expect(await until(() => counter(total), billed)).toBe(billed);
      const [[, time], [, count]] = (await fleet.direct.multi().time().get(tpw).exec()) as [
        [null, [string, string]],
        [null, string | null],
      ];
      const window = Math.floor(Number(time[0]) / (WINDOW_MS / 1000));
      perWindow.set(window, Math.max(perWindow.get(window) ?? 0, Number(count ?? 0)));
    }
    // Redis's total is the origin's own bill to the very token.
    const own = (await (
      await fetch(`${origin.url}/v1/usage`, { headers: { authorization: who } })
    ).json()) as {
      total_tokens: number;
    };
    expect(own.total_tokens).toBe(billed);
    expect(await counter(total)).toBe(own.total_tokens);
    // Sizes were such that windows filled: some requests were denied, and each window's count stayed within
    // the limit plus one request's overshoot (docs/settle.md, "What a window can admit").
    expect(denied).toBeGreaterThan(0);
    expect(perWindow.size).toBeGreaterThan(0);
    for (const count of perWindow.values()) expect(count).toBeLessThanOrEqual(LIMIT + largestOvershoot);
  }, 120_000);

  it("counts exactly what the origin billed when completions run concurrently on both instances", async () => {
    const who = `Bearer ${crypto.randomUUID()}`;
    const total = await stateKey("total", who);
    const sizes = Array.from({ length: 60 }, () => 1 + Math.floor(Math.random() * 200));
    const texts = await Promise.all(
      sizes.map((size, i) =>
        chat(i, { authorization: who }, { stream: true, max_tokens: size }).then(async (r) => ({
          status: r.status,
          text: await r.text(),
        })),
      ),
    );
    const billed = texts.filter((t) => t.status === 200).reduce((sum, t) => sum + usageOf(t.text), 0);
    const own = (await (
      await fetch(`${origin.url}/v1/usage`, { headers: { authorization: who } })
    ).json()) as {
      total_tokens: number;
    };
    expect(own.total_tokens).toBe(billed);
    expect(await until(() => counter(total), billed)).toBe(billed);
  }, 60_000);

  it("settles from a response header, and from a JSON body, giving back what the reservation held too much", async () => {
    const h = crypto.randomUUID();
    const byHeader = await stateKey("by-header", h);
    const response = await chat(0, { "x-h": h }, { max_tokens: 40 });
    expect(response.status).toBe(200);
    expect(response.headers.get("x-usage-total-tokens")).toBe("42");
    await response.text();
    expect(await until(() => counter(byHeader), 42)).toBe(42);

    const j = crypto.randomUUID();
    const byJson = await stateKey("by-json", j);
    // Reserved 500, used 2 + 30: 468 given back.
    const json = await chat(1, { "x-j": j, "x-reserve": "500" }, { max_tokens: 30 });
    expect(((await json.json()) as { usage: { total_tokens: number } }).usage.total_tokens).toBe(32);
    expect(await until(() => counter(byJson), 32)).toBe(32);
  }, 30_000);

  it("keeps the reservation when the value is missing or malformed, and logs one line saying so", async () => {
    const cases = [
      ["json-missing", "x-jm", { max_tokens: 7 }, "no such path"],
      ["json-malformed", "x-jx", { max_tokens: 7, model: "twelve" }, "not a number"],
      ["sse-missing", "x-sm", { max_tokens: 7, stream: true }, "no event carried the path"],
    ] as const;
    for (const [name, header, body, why] of cases) {
      const id = crypto.randomUUID();
      const response = await chat(0, { [header]: id }, body);
      expect(response.status).toBe(200);
      await response.text();
      const line = await until(
        async () =>
          (workers[0] as Worker).logs.filter((l) => l.includes(`rule "${name}"`) && l.includes(why)).length,
        1,
      );
      expect(line).toBe(1);
      const key = await stateKey(name, id);
      const state = (await fleet.direct.get(key)) ?? "";
      // The reservation (cost 5) stands: a counter of 5, or a sliding window's current count of 5.
      expect(state === "5" || state.endsWith(":5")).toBe(true);
    }
  }, 30_000);

  it("denies an identity a settlement pushed past its token bucket until the debt is repaid, with an honest Retry-After", async () => {
    const id = crypto.randomUUID();
    // 100 tokens per 10 s (one per 100 ms), burst 100; one completion of 298 + 2 tokens leaves a debt of 200.
    const first = await chat(0, { "x-b": id }, { max_tokens: 298, stream: true });
    expect(first.status).toBe(200);
    expect(usageOf(await first.text())).toBe(300);
    const key = await stateKey("bucket", id);
    const deadline = Date.now() + 5000;
    let denied: Response | undefined;
    while (Date.now() < deadline) {
      const next = await chat(1, { "x-b": id }, { max_tokens: 1 });
      await next.text();
      if (next.status === 429) {
        denied = next;
        break;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(denied?.status).toBe(429);
    // The TAT lies 300 units (30 s) ahead; one more unit fits once it is within the burst (10 s): ~20 s.
    const retry = Number(denied?.headers.get("retry-after"));
    expect(retry).toBeGreaterThanOrEqual(19);
    expect(retry).toBeLessThanOrEqual(21);
    expect(denied?.headers.get("ratelimit")).toMatch(/"bucket";r=0;/);
    expect(Number(await fleet.direct.pttl(key))).toBeGreaterThan(25_000);
  }, 30_000);

  it("counts a monitor rule's settlement and logs its debt, never denying", async () => {
    const id = crypto.randomUUID();
    const key = await stateKey("watch", id);
    // Limit 10, one completion of 20 tokens: 10 owed, logged; the next ones pass (a monitor rule never denies),
    // and, as with any monitor rule, a request it would deny is not counted.
    for (let i = 0; i < 3; i++) {
      const response = await chat(i, { "x-w": id }, { max_tokens: 18 });
      expect(response.status).toBe(200);
      await response.text();
      expect(await until(() => counter(key), 20)).toBe(20);
    }
    const logs = workers.flatMap((w) => w.logs).filter((l) => l.includes('rule "watch" owes 10'));
    expect(logs).toHaveLength(1);
  }, 30_000);
});
