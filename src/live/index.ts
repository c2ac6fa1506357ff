/**
 * Live modes: switched with `PUT /__floodgate/mode`, stored in Redis, copied into each isolate.
 */
import type { Redis } from "@upstash/redis";
import { LiveModeCache } from "./cache";
import { readChanges } from "./changes";
import { readLiveModes } from "./modes";

export { LiveModeCache, type LiveModeCacheOptions, type LiveModeCacheStats, type WaitUntil } from "./cache";
export { type AdminChange, CHANGE_RING, readChanges, recordChange } from "./changes";
export { explainMode, type ModeSource } from "./effective";
export { isMode, type LiveModes, liveModeKey, NO_LIVE_MODES, readLiveModes, writeLiveMode } from "./modes";

/** What `createLiveModes` needs besides Redis. */
export interface LiveModesOptions {
  /** The configured rule names: the only live per-rule switches read. */
  ruleNames: readonly string[];
  /** Forgets this isolate's cached denial of one identity (the decider's `forget`). */
  forget?: (rule: string, identityHash: string) => void;
  /** How long a fresh isolate's first request waits for the live modes, ms. @default 200 */
  coldLoadTimeoutMs?: number;
  /** Minimum time between two reads of one isolate, ms. @default 1000 */
  refreshIntervalMs?: number;
}

/**
 * The isolate's live-mode copy for one Redis and prefix; create it once per isolate, next to the store.
 * Its once-a-second read also tells it which identities operators reset or re-limited elsewhere, so their
 * cached denials are forgotten here too (changes.ts).
 * @example
 * const liveModes = createLiveModes(store.redis, config.prefix, {
 *   ruleNames: config.rules.map((r) => r.name),
 *   forget: (rule, hash) => decider.forget(rule, hash),
 * });
 * const live = await liveModes.current((p) => c.executionCtx.waitUntil(p));
 */
export function createLiveModes(redis: Redis, prefix: string, options: LiveModesOptions): LiveModeCache {
  const { ruleNames, forget, ...timing } = options;
  return new LiveModeCache({
    load: () => readLiveModes(redis, prefix, ruleNames),
    catchUp: forget
      ? async (seenEpoch, epoch) => {
          const { changes, readUpTo } = await readChanges(redis, prefix, seenEpoch, epoch);
          for (const change of changes) forget(change.rule, change.identityHash);
          return readUpTo;
        }
      : undefined,
    ...timing,
  });
}
