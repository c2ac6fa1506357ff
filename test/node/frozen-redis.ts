// The stack the admin failure tests run on: the real Worker in Miniflare in front of the test file's own
// redis-server (which a test can freeze with SIGSTOP), REST server and echo origin. The REST server reaches
// Redis through a TCP relay that can hold every command back, as a slow link or an overloaded Redis would.
import { connect, createServer, type Socket } from "node:net";
import { expect } from "vitest";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { startEchoOrigin } from "../support/echo-origin.mjs";
import { startWorker } from "../support/miniflare-worker.mjs";

export type Worker = Awaited<ReturnType<typeof startWorker>>;

/** The decision budget (RATE_LIMIT_TIMEOUT_MS): above the default 200, as this machine is shared and busy. */
export const TIMEOUT_MS = 1000;
/** The admin client's timeout per command (the store's `adminTimeoutMs`). */
export const ADMIN_TIMEOUT_MS = 5000;
export const ADMIN_TOKEN = "frozen-admin-token-0123456789";
export const AUTH = { Authorization: `Bearer ${ADMIN_TOKEN}` };

/** One redis-server, its REST server and an origin, for one test file. */
export interface FrozenStack {
  redis: Awaited<ReturnType<typeof startRedis>>;
  rest: Awaited<ReturnType<typeof startRestServer>>;
  origin: Awaited<ReturnType<typeof startEchoOrigin>>;
  /** Holds every command to Redis back `ms` on its way from now on (0 at first); call it between requests. */
  setLagMs(ms: number): void;
  close(): Promise<void>;
}

export async function startStack(): Promise<FrozenStack> {
  const redis = await startRedis();
  let lagMs = 0;
  const sockets = new Set<Socket>();
  const relay = createServer((client) => {
    const upstream = connect(redis.port, "127.0.0.1");
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    }
    // Chunks leave in the order they came, each `lagMs` after it came.
    let queue = Promise.resolve();
    client.on("data", (chunk) => {
      const dueMs = Date.now() + lagMs;
      queue = queue.then(() => sleep(dueMs - Date.now())).then(() => void upstream.write(chunk));
    });
    upstream.pipe(client);
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
  });
  await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
  const { port } = relay.address() as { port: number };
  const rest = await startRestServer({ redisUrl: `redis://127.0.0.1:${port}` });
  const origin = await startEchoOrigin();
  return {
    redis,
    rest,
    origin,
    setLagMs: (ms) => {
      lagMs = ms;
    },
    close: async () => {
      await origin.close();
      await rest.close();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => relay.close(resolve));
      await redis.close();
    },
  };
}

let seq = 0;

/** A Worker of its own (its own breaker, probe cache and pending counts), warmed up while Redis answers. */
export async function warmWorker(stack: FrozenStack, rules: unknown[]): Promise<Worker> {
  const worker = await startWorker({
    bindings: {
      ORIGIN_URL: stack.origin.url,
      UPSTASH_REDIS_REST_URL: stack.rest.url,
      UPSTASH_REDIS_REST_TOKEN: stack.rest.token,
      RATE_LIMIT_RULES: rules,
      RATE_LIMIT_PREFIX: `frozen${Date.now()}-${++seq}`,
      RATE_LIMIT_TIMEOUT_MS: String(TIMEOUT_MS),
      RATE_LIMIT_ADMIN_TOKEN: ADMIN_TOKEN,
    },
  });
  // The first request loads the script and flushes its count at once; the second's count is left pending
  // (an isolate flushes at most every 5 s), for the dashboard to flush before it reads.
  for (let i = 0; i < 2; i++) expect((await proxied(worker)).status).toBe(200);
  expect((await timed(worker, "/__floodgate/health")).json.status).toBe("ok");
  // Health caches its probe's answer for a second: the checks after this must ask the frozen Redis.
  await sleep(1100);
  return worker;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
export const proxied = (worker: Worker) =>
  worker.fetch("/x", { headers: { "CF-Connecting-IP": "192.0.2.1" } });

/** Five decisions in a row run out of their budget on a frozen Redis: the breaker opens for a second. */
export async function openBreaker(worker: Worker): Promise<void> {
  for (let i = 0; i < 5; i++) expect((await proxied(worker)).status).toBe(200);
}

/** One request, its status, body (parsed when JSON) and wall time. */
export async function timed(worker: Worker, path: string, init: RequestInit = {}) {
  const started = performance.now();
  const response = await worker.fetch(path, init);
  const text = await response.text();
  const json = response.headers.get("content-type")?.includes("json") ? JSON.parse(text) : undefined;
  return { status: response.status, text, json, ms: performance.now() - started };
}

/** Runs `body` with redis-server frozen (SIGSTOP), and lets it go on afterwards whatever happened. */
export async function whileFrozen(
  stack: FrozenStack,
  worker: Worker,
  body: () => Promise<void>,
): Promise<void> {
  stack.redis.stop();
  try {
    await body();
  } finally {
    stack.redis.cont();
    await worker.dispose();
  }
}
