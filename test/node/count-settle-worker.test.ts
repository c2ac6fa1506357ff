// A rule that both counts by status and settles its cost from the response (docs/counting.md, docs/settle.md),
// through TWO Worker instances on one Redis, in front of the demo origin playing an OpenAI-compatible API
// (local/demo-origin.mjs, which bills only the completions it answers 200): a completion answered 200 is
// charged exactly its tokens (the reservation settled up or down), one answered 400 gives its whole
// reservation back and settles nothing, so Redis holds exactly what the origin billed; not one unit more, not
// one less. On a tight limit whose reservations are exact, the window never holds more than its limit.
import { describe, expect, it } from "vitest";
import { startDemoOrigin } from "../../local/demo-origin.mjs";
import { useWorkers, type Worker } from "../support/workers";

const PATH = "/v1/chat/completions";
const TIGHT = 300;
const BUCKET_INTERVAL_MS = (30 * 86_400_000) / 1e6; // 2,592 ms a unit: the bucket barely refills during a test
// Each rule applies to the requests that carry its key header (`missing = "skip"` for the others); each charges
// only a 2xx, reserves `x-reserve` tokens and settles to the stream's usage.
const rule = (name: string, header: string, fields: Record<string, unknown>) => ({
  name,
  match: { path: PATH },
  key: `header:${header}`,
  missing: "skip",
  count: { status: ["2xx"] },
  cost: "header:x-reserve",
  settle: "sse:usage.total_tokens",
  ...fields,
});
const RULES = [
  rule("fw", "x-fw", { algorithm: "fixed-window", limit: 1e6, period: "1h" }),
  rule("sw", "x-sw", { algorithm: "sliding-window", limit: 1e6, period: "1h" }),
  rule("tb", "x-tb", { algorithm: "token-bucket", limit: 1e6, period: "30d" }),
  rule("tight", "x-tight", { algorithm: "fixed-window", limit: TIGHT, period: "1h" }),
];

let origin: Awaited<ReturnType<typeof startDemoOrigin>>;
const fleet = useWorkers({
  name: "count-settle",
  before: async () => {
    origin = await startDemoOrigin();
  },
  after: async () => {
    await origin?.close();
  },
  bindings: () => ({ ORIGIN_URL: origin.url, RATE_LIMIT_RULES: RULES, RATE_LIMIT_TIMEOUT_MS: "5000" }),
});
const { workers, prefix } = fleet;

/** The Redis key of a rule's state for an identity (the key layout of docs/scaling-out.md). */
async function stateKey(rule: string, identity: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(identity));
  const hash = Buffer.from(new Uint8Array(digest, 0, 16)).toString("base64url");
  return `${prefix}:${rule}:{${hash}}`;
}

/** The units a rule's state holds: a counter, a sliding window's current count, a bucket's TAT ahead of now. */
async function held(rule: string, key: string): Promise<number> {
  if (rule === "tb") {
    const [[, time], [, tat]] = (await fleet.direct.multi().time().get(key).exec()) as [
      [null, [string, string]],
      [null, string | null],
    ];
    const nowUs = Number(time[0]) * 1e6 + Number(time[1]);
    return Math.max(0, Number(tat ?? 0) - nowUs) / (BUCKET_INTERVAL_MS * 1000);
  }
  const state = (await fleet.direct.get(key)) ?? "0";
  return Number(state.split(":").at(-1));
}

/** Waits until `read()` is within `slack` below `want` (settlements land in the background), and returns it. */
async function until(read: () => Promise<number>, want: number, slack = 0): Promise<number> {
  const deadline = Date.now() + 10_000;
  let got = await read();
  while (!(got <= want && got >= want - slack) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 10));
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

/** The origin's own bill to an `Authorization`. */
async function originBilled(who: string): Promise<number> {
  const response = await fetch(`${origin.url}/v1/usage`, { headers: { authorization: who } });
  return ((await response.json()) as { total_tokens: number }).total_tokens;
}

interface Sent {
  status: number;
  tokens: number;
}

/**
 * A streamed completion through worker `i % 2` reserving `reserve` tokens; `broken`: a body the origin refuses
 * with 400 (and bills nothing). The prompt "hi there" is 2 tokens: a completion of `size` costs `size + 2`.
 */
async function complete(
  i: number,
  headers: Record<string, string>,
  size: number,
  broken: boolean,
  reserve: number,
) {
  const response = await (workers[i % 2] as Worker).fetch(PATH, {
    method: "POST",
    headers: { "content-type": "application/json", "x-reserve": String(reserve), ...headers },
    body: broken
      ? "{not json"
      : JSON.stringify({ messages: [{ role: "user", content: "hi there" }], stream: true, max_tokens: size }),
  });
  const text = await response.text();
  return { status: response.status, tokens: response.status === 200 ? usageOf(text) : 0 } satisfies Sent;
}

describe("count by status and settle on one rule, across two Worker instances", () => {
  it.each(["fw", "sw", "tb"])(
    "%s: holds exactly the tokens of the completions answered 200, whatever was reserved, none of the 400s'",
    async (name) => {
      const who = `Bearer ${crypto.randomUUID()}`;
      const header = `x-${name}`;
      const startedAt = Date.now();
      // 60 at once over both instances: every third refused by the origin, reservations below and above the real
      // cost (so settlements charge more and give back), and a few exact (no settlement).
      const sent = await Promise.all(
        Array.from({ length: 60 }, (_, i) => {
          const size = 1 + Math.floor(Math.random() * 80);
          const reserve = i % 5 === 0 ? size + 2 : 1 + Math.floor(Math.random() * 120);
          return complete(i, { authorization: who, [header]: who }, size, i % 3 === 0, reserve);
        }),
      );
      expect(sent.filter((s) => s.status === 400)).toHaveLength(20);
      expect(sent.filter((s) => s.status === 200)).toHaveLength(40);
      const billed = sent.reduce((sum, s) => sum + s.tokens, 0);
      expect(await originBilled(who)).toBe(billed);
      const key = await stateKey(name, who);
      // A bucket refills as the test runs (one unit per 2.6 s): what it holds may be that much below the bill.
      const refilled = name === "tb" ? (Date.now() - startedAt) / BUCKET_INTERVAL_MS + 1 : 0;
      const got = await until(() => held(name, key), billed, refilled);
      expect(got).toBeLessThanOrEqual(billed);
      expect(got).toBeGreaterThanOrEqual(billed - refilled);
      // Settled: it stays there (nothing lands late, nothing is given back twice).
      await new Promise((r) => setTimeout(r, 300));
      expect(await held(name, key)).toBeGreaterThanOrEqual(got - (name === "tb" ? 1 : 0));
      expect(await held(name, key)).toBeLessThanOrEqual(got);
    },
    60_000,
  );

  it("never lets a window hold more than its limit when reservations are exact, and gives back every refused completion's", async () => {
    const who = `Bearer ${crypto.randomUUID()}`;
    const key = await stateKey("tight", who);
    // 40 completions of 10 to 40 tokens (~1000 asked for a limit of 300), each reserving its exact cost, a
    // third refused by the origin: the counter is only ever the reservations of the requests in flight and the
    // completions charged.
    const sent: Sent[] = [];
    let peak = 0;
    let watching = true;
    const watch = (async () => {
      while (watching) {
        peak = Math.max(peak, Number((await fleet.direct.get(key)) ?? 0));
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    // One refused completion first, so that a refusal is always among the answers (in the crowd below, which
    // requests win the room depends on the machine's timing, and the refused ones may all be turned away).
    sent.push(await complete(1, { authorization: who, "x-tight": who }, 10, true, 12));
    await Promise.all(
      Array.from({ length: 40 }, async (_, i) => {
        const size = 8 + Math.floor(Math.random() * 31);
        sent.push(await complete(i, { authorization: who, "x-tight": who }, size, i % 3 === 0, size + 2));
      }),
    );
    watching = false;
    await watch;
    const charged = sent.reduce((sum, s) => sum + s.tokens, 0);
    expect(sent.some((s) => s.status === 429)).toBe(true);
    expect(sent.some((s) => s.status === 400)).toBe(true);
    expect(charged).toBeLessThanOrEqual(TIGHT);
    expect(peak).toBeLessThanOrEqual(TIGHT);
    expect(await until(() => held("tight", key), charged)).toBe(charged);
    expect(await originBilled(who)).toBe(charged);
    // The refused completions' reservations came back: room for exactly what is left.
    const rest = TIGHT - charged;
    if (rest >= 3) {
      const fits = await complete(0, { authorization: who, "x-tight": who }, rest - 2, false, rest);
      expect(fits.status).toBe(200);
      const over = await complete(1, { authorization: who, "x-tight": who }, 1, false, 3);
      expect(over.status).toBe(429);
    }
  }, 60_000);
});
