import type { MiniflareWorker } from "./miniflare-worker.mjs";

/** The rate algorithms, each a rule of `limit` per hour on `/<algorithm>/*`. */
export const RATE_ALGORITHMS: readonly string[];

/** One rule per rate algorithm (`limit` an hour) and a concurrency rule of `slots` on `/slow`. */
export function burstRules(sizes: { limit: number; slots: number }): Record<string, unknown>[];

/** Its own redis-server, REST server and echo origin. */
export function startBurstStack(): Promise<{
  originUrl: string;
  /** `count` Worker instances over this stack, with `bindings` on top of the Redis and origin ones. */
  start(bindings: Record<string, unknown>, count: number): Promise<MiniflareWorker[]>;
  close(): Promise<void>;
}>;

/** `n` requests of client `ip` to `path` at once, spread over `workers`; what the origin saw of them. */
export function sendBurst(
  workers: Pick<MiniflareWorker, "fetch">[],
  originUrl: string,
  burst: { path: string; ip: string; n: number },
): Promise<{ admitted: number; inFlight: number; statuses: Record<string, number> }>;
