/**
 * Live modes: switched with `PUT /__floodgate/mode`, stored in Redis, copied into each isolate.
 */
import type { RedisPort } from "../engine/redis";
import { LiveModeCache } from "./cache";
import { type AdminChange, CHANGE_RING, readChanges } from "./changes";
import { decodeLiveModes, type LiveModes, liveModeFields, liveModeKey } from "./modes";
import { OverrideIndex, overrideIndexKey } from "./overrides";

export { LiveModeCache, type LiveModeCacheOptions, type LiveModeCacheStats } from "./cache";
export { type AdminChange, CHANGE_RING, readChanges, recordChange } from "./changes";
export { explainMode, type ModeSource } from "./effective";
export {
  bumpSessionEpoch,
  isMode,
  type LiveModes,
  listVersionField,
  liveModeKey,
  NO_LIVE_MODES,
  readLiveModes,
  writeLiveMode,
} from "./modes";
export { IDENTITY_ENTRY, LIST_PAGE, LiveLists, type LiveListsOptions, listKey } from "./lists";
export { LIST_LOG_ITEMS, LIST_LOG_MOST, LIST_LOG_TTL_MS, listLogKey } from "./list-log";
export { OverrideIndex, overrideIndexKey, overrideIndexMember } from "./overrides";

/** What `createLiveModes` needs besides Redis. */
export interface LiveModesOptions {
  /** The configured rule names: the only live per-rule switches read. */
  ruleNames: readonly string[];
  /** The live lists the rules read (`match.list`): their versions are read with the modes (lists.ts). */
  listNames?: readonly string[];
  /** Forgets this isolate's cached denial of one identity (the decider's `forget`). */
  forget?: (rule: string, identityHash: string) => void;
  /**
   * Forgets every block this isolate holds (the decider's `forgetBlocks`): called when changes were missed
   * (more than the log keeps, or one never written), as any of them may have been a reset lifting a block.
   */
  forgetBlocks?: () => void;
  /** How long a fresh isolate's first request waits for the live modes, ms. @default 200 */
  coldLoadTimeoutMs?: number;
  /** Minimum time between two reads of one isolate, ms. @default 1000 */
  refreshIntervalMs?: number;
  /**
   * How long a change announced in the log but never written blocks the changes after it, ms (changes.ts:
   * its writer failed between its two commands). @default LOST_CHANGE_AFTER_MS
   */
  lostChangeAfterMs?: number;
  /** Clock, ms. @default Date.now */
  now?: () => number;
}

/**
 * A change whose slot is still unwritten this long after a reader first met it is taken as lost: longer than
 * two admin commands' timeouts (the recording's second command is sent within one and answered within the
 * next), so a slow write is waited for, while a lost one delays the changes after it by seconds, not forever.
 */
export const LOST_CHANGE_AFTER_MS = 15_000;

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
export function createLiveModes(redis: RedisPort, prefix: string, options: LiveModesOptions): LiveModeCache {
  const {
    ruleNames,
    listNames,
    forget,
    forgetBlocks,
    lostChangeAfterMs = LOST_CHANGE_AFTER_MS,
    ...timing
  } = options;
  const now = timing.now ?? Date.now;
  const overrides = new OverrideIndex();
  // The first unwritten slot this isolate stopped at, and since when (ms).
  let gap: { epoch: number; sinceMs: number } | undefined;
  const fields = liveModeFields(ruleNames, listNames);
  return new LiveModeCache({
    load: async (): Promise<LiveModes> => {
      const modesRead = ["hmget", liveModeKey(prefix), ...fields];
      if (overrides.loaded) return decodeLiveModes(redis, fields, await redis.send(modesRead));
      // The epoch is read before the index: every change after it is replayed from the log (catchUp).
      const [modes, members] = await redis.pipeline([modesRead, ["smembers", overrideIndexKey(prefix)]]);
      overrides.replace(Array.isArray(members) ? members : []);
      return decodeLiveModes(redis, fields, modes);
    },
    catchUp: async (seenEpoch, epoch) => {
      // More changes than the log holds: some new override may be among those lost; read the index again.
      if (epoch - seenEpoch > CHANGE_RING) missed();
      let { changes, readUpTo } = await readChanges(redis, prefix, seenEpoch, epoch);
      follow(changes);
      if (readUpTo === epoch) gap = undefined;
      else if (gap?.epoch !== readUpTo + 1) gap = { epoch: readUpTo + 1, sinceMs: now() };
      else if (now() - gap.sinceMs >= lostChangeAfterMs) {
        // Its writer failed after taking the epoch: skip it, as a change past the ring's end is skipped (it
        // may have been an override: read the index again), and read on.
        missed();
        gap = undefined;
        ({ changes, readUpTo } = await readChanges(redis, prefix, readUpTo + 1, epoch));
        follow(changes);
      }
      return readUpTo;
    },
    overrides,
    ...timing,
  });

  /** Changes this isolate will never read: any may have set an override, or lifted a block. */
  function missed(): void {
    overrides.invalidate();
    forgetBlocks?.();
  }

  function follow(changes: readonly AdminChange[]): void {
    for (const change of changes) {
      forget?.(change.rule, change.identityHash);
      if (change.override !== undefined) overrides.set(change.rule, change.identityHash, change.override);
    }
  }
}
