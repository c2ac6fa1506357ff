/**
 * Live modes in Redis: one hash at `<prefix>:mode` (no TTL, like overrides: a switch lasts until cleared).
 * Field `global` holds the live global mode, field `rule:<name>` a live per-rule mode. Rule names are
 * `[A-Za-z0-9_-]`, so the two kinds of field can never collide. The same hash carries the admin change
 * log (`epoch`, `change:<n>`; see changes.ts), so one read per second tells an isolate both.
 */
import type { RedisPort } from "../engine/redis";
import type { Mode } from "../engine/types";
import { MODES } from "../engine/types";
import type { OverrideIndex } from "./overrides";
import { redisNowMs } from "./redis-clock";

/** What live switches are in force; absent = no live switch, the configured mode applies. */
export interface LiveModes {
  /** The live global mode (below a rule's configured `mode`, above `RATE_LIMIT_MODE`). */
  global?: Mode;
  /** When the live global mode lapses, ms since the epoch; absent = until cleared. */
  globalUntilMs?: number;
  /** Live per-rule modes, by rule name (above everything else). */
  rules: Record<string, Mode>;
  /** How many admin changes (resets, overrides) were ever recorded; absent = none. */
  epoch?: number;
  /**
   * How many times the dashboard was signed out of: a session cookie is signed under the epoch it was issued
   * in, so a sign-out ends every session (src/dashboard/session.ts). Absent = never (0).
   */
  sessionEpoch?: number;
  /** Which identities have an override (overrides.ts); absent = unknown, every decision reads its override. */
  overrides?: OverrideIndex;
  /** Each live list's version (lists.ts), for the lists asked for; absent = never written (empty). */
  lists?: Record<string, number>;
}

/** No live switch at all: what an isolate assumes when Redis cannot tell it otherwise. */
export const NO_LIVE_MODES: LiveModes = Object.freeze({ rules: Object.freeze({}) }) as LiveModes;

const GLOBAL_FIELD = "global";
/**
 * When the live global mode lapses (ms since the epoch by Redis's clock, redis-clock.ts; 0 = never): every
 * isolate ignores a `global` past it by Redis's clock, so a switch with a TTL ends everywhere at once even if
 * nobody clears it, however far an isolate's own clock is off.
 */
const GLOBAL_UNTIL_FIELD = "global_until";
const RULE_FIELD_PREFIX = "rule:";
/** A live list's version: `list:<name>`, raised by every write of the list (lists.ts). */
const LIST_FIELD_PREFIX = "list:";

/** The field of the live-mode hash holding one live list's version. */
export const listVersionField = (name: string): string => `${LIST_FIELD_PREFIX}${name}`;
/** The field counting admin changes (changes.ts). */
export const EPOCH_FIELD = "epoch";
/** The field counting dashboard sign-outs (`LiveModes.sessionEpoch`). */
const SESSION_EPOCH_FIELD = "session_epoch";

/** The Redis key of the live-mode hash. */
export const liveModeKey = (prefix: string): string => `${prefix}:mode`;

/** True for `on` | `off` | `monitor`. */
export const isMode = (value: unknown): value is Mode => MODES.includes(value as Mode);

/**
 * A hash reply as field → value: HGETALL comes back as the flat `[field, value, …]` array Redis sends (an
 * object, as some clients make of it, is taken as it is).
 */
export function fieldMap(reply: unknown): Record<string, unknown> {
  if (!reply) return {};
  if (!Array.isArray(reply)) return reply as Record<string, unknown>;
  const fields: Record<string, unknown> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) fields[String(reply[i])] = reply[i + 1];
  return fields;
}

/** The values of `fields` from an HMGET reply (an array as Redis sends it; an object or null taken too). */
export function hashValues(reply: unknown, fields: readonly string[]): unknown[] {
  if (Array.isArray(reply)) return fields.map((_, i) => reply[i] ?? null);
  const map = (reply ?? {}) as Record<string, unknown>;
  return fields.map((field) => map[field] ?? null);
}

/**
 * Reads every live switch (and the admin change count). With `ruleNames`, one HMGET of exactly the fields
 * that matter (the change log in the same hash is not sent over the wire); without, HGETALL.
 * Unknown fields or values (written by hand) are ignored, never obeyed.
 */
export async function readLiveModes(
  redis: RedisPort,
  prefix: string,
  ruleNames?: readonly string[],
): Promise<LiveModes> {
  if (ruleNames) {
    const names = liveModeFields(ruleNames);
    return decodeLiveModes(redis, names, await redis.send(["hmget", liveModeKey(prefix), ...names]));
  }
  return judged(redis, fieldMap(await redis.send(["hgetall", liveModeKey(prefix)])));
}

/**
 * The fields of the live-mode hash that matter for these rules (what `readLiveModes` asks for), and the
 * versions of the live lists they read: one read a second tells an isolate both.
 */
export const liveModeFields = (ruleNames: readonly string[], listNames: readonly string[] = []): string[] => [
  GLOBAL_FIELD,
  GLOBAL_UNTIL_FIELD,
  EPOCH_FIELD,
  SESSION_EPOCH_FIELD,
  ...ruleNames.map((name) => `${RULE_FIELD_PREFIX}${name}`),
  ...listNames.map(listVersionField),
];

/**
 * The live modes in an HMGET reply of `names` (from {@link liveModeFields}); a global switch's end is judged by
 * Redis's clock (one `TIME` per port every ten minutes, and only while a switch with an end is in the hash).
 */
export function decodeLiveModes(
  redis: RedisPort,
  names: readonly string[],
  reply: unknown,
): Promise<LiveModes> {
  const values = hashValues(reply, names);
  return judged(redis, Object.fromEntries(names.map((name, i) => [name, values[i]])));
}

/** When the live global switch ends (Redis's clock, ms), 0 for never. */
const untilOf = (fields: Record<string, unknown>): number => Number(fields[GLOBAL_UNTIL_FIELD] ?? 0) || 0;

/** The live modes of these fields, with Redis's time now when a global switch has an end. */
async function judged(redis: RedisPort, fields: Record<string, unknown>): Promise<LiveModes> {
  return parseLiveModes(fields, untilOf(fields) > 0 ? await redisNowMs(redis) : 0);
}

/** @param nowMs Redis's time now (only read when a global switch has an end) */
function parseLiveModes(fields: Record<string, unknown>, nowMs: number): LiveModes {
  const modes: LiveModes = { rules: {} };
  const until = untilOf(fields); // 0: until cleared
  const globalLapsed = until > 0 && nowMs >= until;
  if (until > 0 && !globalLapsed) modes.globalUntilMs = until;
  for (const [field, value] of Object.entries(fields)) {
    if (field === EPOCH_FIELD && value !== null && value !== undefined) modes.epoch = Number(value);
    if (field === SESSION_EPOCH_FIELD && value !== null && value !== undefined)
      modes.sessionEpoch = Number(value);
    if (field.startsWith(LIST_FIELD_PREFIX)) {
      modes.lists ??= {};
      modes.lists[field.slice(LIST_FIELD_PREFIX.length)] = Number(value ?? 0) || 0;
    }
    if (!isMode(value)) continue;
    if (field === GLOBAL_FIELD) {
      if (!globalLapsed) modes.global = value;
    } else if (field.startsWith(RULE_FIELD_PREFIX))
      modes.rules[field.slice(RULE_FIELD_PREFIX.length)] = value;
  }
  return modes;
}

/**
 * Sets (or with `mode: null` clears) the live mode of one rule, or the global one when `rule` is absent.
 * The hash never gets a TTL: a live switch lasts until it is cleared, or, for the global one given
 * `ttlSeconds`, until then (`global_until`, written in the same HSET; 0 without a TTL: never lapses).
 */
export async function writeLiveMode(
  redis: RedisPort,
  prefix: string,
  rule: string | undefined,
  mode: Mode | null,
  ttlSeconds?: number,
): Promise<void> {
  const key = liveModeKey(prefix);
  if (rule !== undefined) {
    const field = `${RULE_FIELD_PREFIX}${rule}`;
    if (mode === null) await redis.send(["hdel", key, field]);
    else await redis.send(["hset", key, field, mode]);
    return;
  }
  if (mode === null) await redis.send(["hdel", key, GLOBAL_FIELD, GLOBAL_UNTIL_FIELD]);
  else {
    // By Redis's clock, as every isolate judges it (redis-clock.ts).
    const until = ttlSeconds === undefined ? 0 : (await redisNowMs(redis)) + ttlSeconds * 1000;
    await redis.send(["hset", key, GLOBAL_FIELD, mode, GLOBAL_UNTIL_FIELD, until]);
  }
}

/**
 * Ends every dashboard session: the sign-out count moves on, and every isolate reads it with its live modes
 * (within about a second; src/dashboard/session.ts). Returns the new count.
 */
export async function bumpSessionEpoch(redis: RedisPort, prefix: string): Promise<number> {
  return Number(await redis.send(["hincrby", liveModeKey(prefix), SESSION_EPOCH_FIELD, 1]));
}
