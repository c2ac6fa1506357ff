// A burst of one identity's requests, all at once, spread over several Worker instances, and what reached
// the origin: how many were let through (counted by the echo origin's `x-count-tag`) and the most in flight
// there at once. For the test and the benchmark of how far fail-open can over-admit (docs/fail-open.md).
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { startEchoOrigin } from "./echo-origin.mjs";
import { startWorker } from "./miniflare-worker.mjs";

/** The rate algorithms, each a rule of `limit` per hour on `/<algorithm>/*`. */
export const RATE_ALGORITHMS = ["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"];

/**
 * The rules of a burst run: one per rate algorithm (`limit` an hour: a run stays inside one window) and a
 * concurrency rule of `slots` on `/slow`.
 * @param {{ limit: number, slots: number }} sizes
 */
export function burstRules({ limit, slots }) {
  return [
    ...RATE_ALGORITHMS.map((algorithm) => ({
      name: algorithm,
      match: { path: `/${algorithm}/*` },
      key: "ip",
      algorithm,
      limit,
      period: "1h",
    })),
    { name: "slots", match: { path: "/slow" }, key: "ip", algorithm: "concurrency", limit: slots },
  ];
}

/**
 * Its own redis-server, REST server and echo origin (nothing else loads them while a burst is measured).
 * @returns {Promise<{ originUrl: string, start: (bindings: Record<string, unknown>, count: number) => Promise<Awaited<ReturnType<typeof startWorker>>[]>, close: () => Promise<void> }>}
 */
export async function startBurstStack() {
  const redis = await startRedis();
  const rest = await startRestServer({ redisUrl: redis.url });
  const origin = await startEchoOrigin();
  /** @type {Awaited<ReturnType<typeof startWorker>>[]} */
  const started = [];
  return {
    originUrl: origin.url,
    /** `count` Worker instances over this stack, with `bindings` on top of the Redis and origin ones. */
    async start(bindings, count) {
      const workers = await Promise.all(
        Array.from({ length: count }, () =>
          startWorker({
            bindings: {
              ORIGIN_URL: origin.url,
              UPSTASH_REDIS_REST_URL: rest.url,
              UPSTASH_REDIS_REST_TOKEN: rest.token,
              ...bindings,
            },
          }),
        ),
      );
      started.push(...workers);
      return workers;
    },
    async close() {
      await Promise.allSettled(started.map((w) => w.dispose()));
      await origin.close();
      await rest.close();
      await redis.close();
    },
  };
}

/**
 * Sends `n` requests of client `ip` to `path` at once, request i to `workers[i % workers.length]`, and
 * reads what the origin saw of them.
 * @param {{ fetch: (path: string, init?: RequestInit) => Promise<Response> }[]} workers
 * @param {string} originUrl
 * @param {{ path: string, ip: string, n: number }} burst
 * @returns {Promise<{ admitted: number, inFlight: number, statuses: Record<string, number> }>} admitted: requests
 *   the origin received; inFlight: the most it was answering at once; statuses: responses by status and, where
 *   the decision did not come the normal way, its `Server-Timing` reason (`200 timeout`)
 */
export async function sendBurst(workers, originUrl, { path, ip, n }) {
  const tag = `burst-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  /** @type {Record<string, number>} */
  const statuses = {};
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const worker = workers[i % workers.length];
      const response = await worker.fetch(path, { headers: { "CF-Connecting-IP": ip, "x-count-tag": tag } });
      await response.arrayBuffer();
      const reason = /desc="?([^";,]+)/.exec(response.headers.get("Server-Timing") ?? "")?.[1];
      const key = reason === undefined ? String(response.status) : `${response.status} ${reason}`;
      statuses[key] = (statuses[key] ?? 0) + 1;
    }),
  );
  const read = async (what) => (await fetch(`${originUrl}/${what}/${tag}`)).json();
  const { count } = await read("__counts");
  const { max } = await read("__inflight");
  return { admitted: count, inFlight: max, statuses };
}
