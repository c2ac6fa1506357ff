/**
 * The admin change log: how a reset or an override made in one isolate reaches the deny caches (and
 * leases) of all the others. A deny cache answers a denied identity from memory until its retry time, so without this a client
 * reset by an operator could stay blocked in other isolates for up to a whole period.
 *
 * Every change increments `epoch` in the live-mode hash and writes `change:<epoch % CHANGE_RING>` =
 * `<epoch>|<rule>|<hash>`, plus `|o1` / `|o0` when an override was set / removed. Isolates already read
 * that hash once a second; when `epoch` has moved, they read the slots they missed and forget those identities. Bounded: the ring never holds more than
 * `CHANGE_RING` fields. More changes than that between two reads of one isolate: the excess is skipped and
 * those denials run out on their own, as without the log, and the isolate reads the override index
 * (overrides.ts) again, since it may have missed a new override.
 */
import type { RedisPort } from "../engine/redis";
import { EPOCH_FIELD, hashValues, liveModeKey } from "./modes";

/** Slots in the ring of recent changes. */
export const CHANGE_RING = 1024;

const slotField = (epoch: number, ring: number): string => `change:${epoch % ring}`;

/** One identity whose state an operator changed under one rule. */
export interface AdminChange {
  rule: string;
  identityHash: string;
  /** An override was set (`true`) or removed (`false`); absent for a reset (overrides.ts follows it). */
  override?: boolean;
}

const OVERRIDE_SET = "o1";
const OVERRIDE_REMOVED = "o0";

/** Records that an operator changed one identity's state (reset, override set or removed). */
export async function recordChange(
  redis: RedisPort,
  prefix: string,
  change: AdminChange,
  ring = CHANGE_RING,
): Promise<void> {
  const epoch = Number(await redis.send(["hincrby", liveModeKey(prefix), EPOCH_FIELD, 1]));
  // Written after the increment: a reader that sees the new epoch before this slot finds an older entry
  // there (its number does not match), stops, and tries again on its next read; one never written (this
  // writer failed here) it skips after a while (LOST_CHANGE_AFTER_MS, index.ts).
  const entry = `${epoch}|${change.rule}|${change.identityHash}${overridePart(change)}`;
  await redis.send(["hset", liveModeKey(prefix), slotField(epoch, ring), entry]);
}

/**
 * The changes after `seenEpoch` up to `epoch`, and the epoch read up to (the last one whose slot was
 * already written; `epoch` itself when all were).
 */
export async function readChanges(
  redis: RedisPort,
  prefix: string,
  seenEpoch: number,
  epoch: number,
  ring = CHANGE_RING,
): Promise<{ changes: AdminChange[]; readUpTo: number }> {
  if (epoch <= seenEpoch) return { changes: [], readUpTo: seenEpoch };
  const first = Math.max(seenEpoch + 1, epoch - ring + 1);
  const epochs = Array.from({ length: epoch - first + 1 }, (_, i) => first + i);
  const fields = epochs.map((n) => slotField(n, ring));
  const values = hashValues(await redis.send(["hmget", liveModeKey(prefix), ...fields]), fields);
  const changes: AdminChange[] = [];
  let readUpTo = first - 1;
  for (const [i, n] of epochs.entries()) {
    const [number, rule, identityHash, kind] = String(values[i] ?? "").split("|");
    if (Number(number) !== n || !rule || !identityHash) break;
    const change: AdminChange = { rule, identityHash };
    if (kind === OVERRIDE_SET || kind === OVERRIDE_REMOVED) change.override = kind === OVERRIDE_SET;
    changes.push(change);
    readUpTo = n;
  }
  return { changes, readUpTo };
}

const overridePart = (change: AdminChange): string =>
  change.override === undefined ? "" : `|${change.override ? OVERRIDE_SET : OVERRIDE_REMOVED}`;
