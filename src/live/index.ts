/**
 * Live modes: switched with `PUT /__floodgate/mode`, stored in Redis, copied into each isolate.
 */
import type { Redis } from "@upstash/redis";
import { LiveModeCache } from "./cache";
import { readLiveModes } from "./modes";

export { LiveModeCache, type LiveModeCacheOptions, type LiveModeCacheStats, type WaitUntil } from "./cache";
export { explainMode, type ModeSource } from "./effective";
export { isMode, type LiveModes, liveModeKey, NO_LIVE_MODES, readLiveModes, writeLiveMode } from "./modes";

/**
 * The isolate's live-mode copy for one Redis and prefix; create it once per isolate, next to the store.
 * `coldLoadTimeoutMs` bounds how long a fresh isolate's first request waits for it (use the decision budget).
 * @example
 * const liveModes = createLiveModes(store.redis, config.prefix, { coldLoadTimeoutMs: config.timeoutMs });
 * const live = await liveModes.current((p) => c.executionCtx.waitUntil(p));
 */
export function createLiveModes(
  redis: Redis,
  prefix: string,
  options: { coldLoadTimeoutMs?: number; refreshIntervalMs?: number } = {},
): LiveModeCache {
  return new LiveModeCache({ load: () => readLiveModes(redis, prefix), ...options });
}
