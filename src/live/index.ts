/**
 * Live modes: switched with `PUT /__floodgate/mode`, stored in Redis, copied into each isolate.
 */
import type { Redis } from "@upstash/redis";
import { LiveModeCache } from "./cache";
import { CHANGE_RING, readChanges } from "./changes";
import { type LiveModes, liveModeFields, liveModeKey, liveModesFrom } from "./modes";
import { OverrideIndex, overrideIndexKey } from "./overrides";

export { LiveModeCache, type LiveModeCacheOptions, type LiveModeCacheStats } from "./cache";
export { type AdminChange, CHANGE_RING, readChanges, recordChange } from "./changes";
export { explainMode, type ModeSource } from "./effective";
export { isMode, type LiveModes, liveModeKey, NO_LIVE_MODES, readLiveModes, writeLiveMode } from "./modes";
export { OverrideIndex, overrideIndexKey, overrideIndexMember } from "./overrides";

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
 * cached denials are forgotten here too and its override index stays current (changes.ts, overrides.ts).
 * The first read (a fresh isolate's, within the cold-load budget) also loads the override index, in the
 * same Redis round trip.
 * @example
 * const liveModes = createLiveModes(store.redis, config.prefix, {
 *   ruleNames: config.rules.map((r) => r.name),
 *   forget: (rule, hash) => decider.forget(rule, hash),
 * });
 * const live = await liveModes.current((p) => c.executionCtx.waitUntil(p));
 */
export function createLiveModes(redis: Redis, prefix: string, options: LiveModesOptions): LiveModeCache {
  const { ruleNames, forget, ...timing } = options;
  const overrides = new OverrideIndex();
  const fields = liveModeFields(ruleNames);
  return new LiveModeCache({
    load: async (): Promise<LiveModes> => {
      if (overrides.loaded) return liveModesFrom(fields, await redis.hmget(liveModeKey(prefix), ...fields));
      // The epoch is read before the index: every change after it is replayed from the log (catchUp).
      const [modes, members] = (await redis
        .pipeline()
        .hmget(liveModeKey(prefix), ...fields)
        .smembers(overrideIndexKey(prefix))
        .exec()) as [unknown, unknown[]];
      overrides.replace(Array.isArray(members) ? members : []);
      return liveModesFrom(fields, modes);
    },
    catchUp: async (seenEpoch, epoch) => {
      // More changes than the log holds: some new override may be among those lost; read the index again.
      if (epoch - seenEpoch > CHANGE_RING) overrides.invalidate();
      const { changes, readUpTo } = await readChanges(redis, prefix, seenEpoch, epoch);
      for (const change of changes) {
        forget?.(change.rule, change.identityHash);
        if (change.override !== undefined) overrides.set(change.rule, change.identityHash, change.override);
      }
      return readUpTo;
    },
    overrides,
    ...timing,
  });
}
