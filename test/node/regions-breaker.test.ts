/**
 * A region whose database stops answering (docs/regions.md, "When a region's database is down"): its requests are
 * decided at the primary, exactly, and after a few calls that waited out half their budget the region's breaker
 * opens, so the next ones go straight to the primary; once the database answers again a probe closes the breaker
 * and the region's pools decide again. Real redis-servers (a primary and `eu`) behind REST servers; `eu` is
 * reached through a proxy the test can make silent (it accepts and never answers: the slowest way to be down).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, expect, it, vi } from "vitest";
import {
  type RedisHandle,
  type RestServer,
  startRedisServers,
  startRestServer,
} from "../../redis-rest/index.mjs";
import { stateKey } from "../../src/engine/keys";
import type { Decision, RuleCall } from "../../src/engine/types";
import { regionalStage } from "../../src/regions/decider";
import { createEngine, type Engine } from "../../src/resilience/engine";
import { requestId, ruleCall, uniquePrefix } from "./lua-support";

const TOKEN = "regions-breaker-token";
/** The decision budget, ms: a silent region costs a request half of it until the breaker opens. */
const BUDGET_MS = 1000;

let servers: RedisHandle[];
let primary: RestServer;
let eu: RestServer;
let proxy: Server;
let proxyUrl: string;
let primaryRedis: IORedis;
/** While true the proxy to `eu` swallows every request. */
let silent = false;
const held: ServerResponse[] = [];

beforeAll(async () => {
  servers = await startRedisServers(2);
  const [p, region] = servers as [RedisHandle, RedisHandle];
  [primary, eu] = await Promise.all([
    startRestServer({ redisUrl: p.url, token: TOKEN }),
    startRestServer({ redisUrl: region.url, token: TOKEN }),
  ]);
  primaryRedis = new IORedis(p.url, { maxRetriesPerRequest: 1 });
  proxy = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    if (silent) {
      held.push(res);
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const answer = await fetch(new URL(req.url ?? "/", eu.url), {
      method: req.method,
      headers: { authorization: req.headers.authorization ?? "", "content-type": "application/json" },
      body: req.method === "GET" ? undefined : Buffer.concat(chunks),
    });
    res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "" });
    res.end(Buffer.from(await answer.arrayBuffer()));
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
}, 60_000);

afterAll(async () => {
  for (const res of held) res.destroy();
  proxy?.closeAllConnections();
  await new Promise((resolve) => proxy?.close(resolve));
  primaryRedis?.disconnect();
  await Promise.all([primary, eu].map((r) => r?.close()));
  await Promise.all((servers ?? []).map((s) => s.close()));
});

/** An isolate of the region `eu`, reached through the proxy. */
const isolate = (prefix: string): Engine =>
  createEngine({
    leases: "off",
    endpoints: [{ url: primary.url, token: TOKEN }],
    prefix,
    timeoutMs: BUDGET_MS,
    adminTimeoutMs: 5_000,
    decider: { fallbackEntries: 0 },
    regional: regionalStage([{ name: "eu", url: proxyUrl, token: TOKEN }]),
  });

/** Decides `call` in `eu`; how long it took, ms; waits for what it left for waitUntil. */
async function timedInEu(engine: Engine, call: RuleCall): Promise<{ decision: Decision; ms: number }> {
  const background: Promise<unknown>[] = [];
  const started = performance.now();
  const decision = await engine.decider.decide([call], requestId(), {
    region: "eu",
    waitUntil: (p) => void background.push(p),
  });
  const ms = performance.now() - started;
  await Promise.all(background);
  return { decision, ms };
}

it("decides a silent region's requests at the primary, waits out half the budget only until its breaker opens, and goes back to the pools once it answers", async () => {
  const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
  const prefix = uniquePrefix("region-breaker");
  const engine = isolate(prefix);
  const call = ruleCall({ algorithm: "fixed-window", limit: 1000, periodMs: 3_600_000 });
  // The region answers: after the first request's grant lands, its pools decide.
  await timedInEu(engine, call);
  expect((await timedInEu(engine, call)).decision.results[0]?.source).toBe("lease");

  const counted = async () => Number(await primaryRedis.get(stateKey(prefix, call.rule, call.identityHash)));
  const before = await counted();

  silent = true;
  const slow: number[] = [];
  for (let i = 0; i < 30; i++) {
    const { decision, ms } = await timedInEu(engine, call);
    expect(decision.allowed).toBe(true);
    expect(decision.results[0]?.source).toBe("redis"); // the primary's answer, never the region's
    if (ms >= BUDGET_MS / 2 - 50) slow.push(i);
  }
  // Five calls in a row fail and open the breaker (1 s); at most a probe a second after that.
  expect(slow.slice(0, 5)).toEqual([0, 1, 2, 3, 4]);
  expect(slow.length).toBeLessThanOrEqual(8);
  const opened = warn.mock.calls.map(([line]) => String(line)).filter((l) => l.includes("region eu"));
  expect(opened[0]).toMatch(
    /^floodgate: region eu: its database does not answer; the primary decides its requests for \d+ ms$/,
  );
  expect(opened.join("\n")).not.toContain(TOKEN);

  // The primary counted each of the 30 once, and leased the silent region nothing.
  expect(await counted()).toBe(before + 30);

  silent = false;
  for (const res of held.splice(0)) res.destroy();
  // The next probe (within the longest cool-down) finds it back, and the pools decide again.
  await expect
    .poll(async () => (await timedInEu(engine, call)).decision.results[0]?.source, {
      timeout: 15_000,
      interval: 200,
    })
    .toBe("lease");
  expect(warn.mock.calls.map(([line]) => String(line))).toContain(
    "floodgate: region eu: its database answers again; its pools decide again",
  );
  warn.mockRestore();
});
