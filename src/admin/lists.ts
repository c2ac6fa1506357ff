/**
 * Live lists in Redis, as the admin API writes and reads them (docs/lists.md; the layout is in
 * src/live/lists.ts). Every entry of a request is checked before anything is written; the entries are then
 * staged under keys of their own and moved into the list by ONE script (lua/list-write.lua), which also logs
 * the change, so a list is never seen half-written and a refused request changed nothing. The list's version is
 * raised after: every isolate applies the change (or reads the list again) within about a second.
 */
import { hashFromHex, hashIdentity } from "../engine/keys";
import type { RedisCommand, RedisPort } from "../engine/redis";
import { LIST_WRITE } from "../engine/scripts";
import {
  IDENTITY_ENTRY,
  LIST_LOG_ITEMS,
  LIST_LOG_MOST,
  LIST_LOG_TTL_MS,
  listKey,
  listLogKey,
  listVersionField,
  liveModeKey,
} from "../live";
import { formatPrefix, parsePrefix } from "../util/address";
import { badRequest } from "./problem";

/** Most entries one list may hold. */
export const MAX_LIST_ENTRIES = 100_000;
/** Longest entry, in characters: an address, a CIDR, or an identity as a rule's key extracts it. */
export const MAX_ENTRY_LENGTH = 256;
/** Longest TTL of an entry: ten years, in seconds (beyond that, leave `ttl` out). */
const MAX_TTL_SECONDS = 10 * 365 * 86_400;
/** Entries sent to Redis in one staging request. */
const STAGE_CHUNK = 5000;
/** How long staged entries live when their request never finishes, ms. */
const STAGE_TTL_MS = 120_000;

/** Forces an entry to be read as an identity, whatever it looks like (`id:1.2`). */
const IDENTITY_PREFIX = "id:";
/** A hashed identity, as lists show it. */
const HASHED = /^[A-Za-z0-9_-]{22}$/;
/** What an address or a CIDR is written with: anything else is an identity. */
const ADDRESS_LIKE = /^[0-9A-Fa-f:.[\]]+(\/.*)?$/;

/** One checked entry: its canonical member and when it expires (seconds from now; 0 = never). */
export interface ListEntry {
  member: string;
  ttlSeconds: number;
}

/**
 * Checks every entry of `field` (strings, or `{ entry, ttl? }`), each in its canonical form; the first bad
 * one is a 400 naming it (`entries[3]: "10.0.0.0/33" has no valid prefix length …`). `defaultTtl` applies to
 * entries without their own. Identities are hashed here, as the proxy hashes what a rule's key extracts.
 */
export async function checkEntries(
  field: string,
  input: unknown,
  defaultTtl: unknown,
  allowTtl = true,
): Promise<ListEntry[]> {
  if (!Array.isArray(input)) throw badRequest(`${field}: expected an array of entries`);
  if (input.length > MAX_LIST_ENTRIES) {
    throw badRequest(`${field}: ${input.length} entries, more than a list may hold (${MAX_LIST_ENTRIES})`);
  }
  const fallbackTtl = ttlOf("ttl", defaultTtl);
  const entries: ListEntry[] = [];
  for (const [i, item] of input.entries()) {
    const at = `${field}[${i}]`;
    let text: unknown = item;
    let ttlSeconds = fallbackTtl;
    if (typeof item === "object" && item !== null && !Array.isArray(item)) {
      const { entry, ttl, ...rest } = item as Record<string, unknown>;
      const unknown = Object.keys(rest)[0];
      if (unknown !== undefined)
        throw badRequest(`${at}.${unknown}: unknown field (an entry has entry, ttl)`);
      if (!allowTtl && ttl !== undefined) throw badRequest(`${at}.ttl: an entry being removed has no TTL`);
      text = entry;
      if (ttl !== undefined) ttlSeconds = ttlOf(`${at}.ttl`, ttl);
    }
    entries.push({ member: await memberOf(at, text), ttlSeconds });
  }
  return entries;
}

function ttlOf(field: string, ttl: unknown): number {
  if (ttl === undefined) return 0;
  if (typeof ttl !== "number" || !Number.isInteger(ttl) || ttl < 1 || ttl > MAX_TTL_SECONDS) {
    throw badRequest(`${field}: must be a whole number of seconds from 1 to ${MAX_TTL_SECONDS}`);
  }
  return ttl;
}

/** One entry's canonical member: an address or CIDR in its canonical text, or `hash:<hashed identity>`. */
async function memberOf(at: string, entry: unknown): Promise<string> {
  if (typeof entry !== "string")
    throw badRequest(`${at}: an entry is a string (an address, a CIDR or an identity)`);
  const text = entry.trim();
  if (text === "") throw badRequest(`${at}: an empty entry`);
  if (text.length > MAX_ENTRY_LENGTH) throw badRequest(`${at}: longer than ${MAX_ENTRY_LENGTH} characters`);
  if (text.startsWith(IDENTITY_ENTRY)) {
    const hashed = text.slice(IDENTITY_ENTRY.length);
    const hash = HASHED.test(hashed) ? hashed : hashFromHex(hashed);
    if (hash === undefined) {
      throw badRequest(
        `${at}: "hash:" must be followed by a hashed identity (22 characters of base64url, or 32 hex digits)`,
      );
    }
    return `${IDENTITY_ENTRY}${hash}`;
  }
  if (text.startsWith(IDENTITY_PREFIX))
    return `${IDENTITY_ENTRY}${await hashIdentity(text.slice(IDENTITY_PREFIX.length))}`;
  if (!ADDRESS_LIKE.test(text) || !/[.:]/.test(text)) return `${IDENTITY_ENTRY}${await hashIdentity(text)}`;
  const prefix = parsePrefix(text);
  if (typeof prefix === "string") throw badRequest(`${at}: ${prefix}`);
  return formatPrefix(prefix);
}

/**
 * A list's entries as Redis holds them now: each with its TTL left (seconds, rounded up; none = never), the
 * soonest to expire first. `limit`: only the first that many (the dashboard's view), `count` still all of them.
 */
export async function readList(
  redis: RedisPort,
  prefix: string,
  name: string,
  limit?: number,
): Promise<{ version: number; count: number; entries: (string | { entry: string; ttl: number })[] }> {
  const key = listKey(prefix, name);
  const versionRead = ["hget", liveModeKey(prefix), listVersionField(name)] as const;
  let members: unknown;
  let version: unknown;
  let nowMs: number;
  let count: number | undefined;
  if (limit === undefined) {
    let time: unknown;
    [members, version, time] = await redis.pipeline([
      ["zrange", key, 0, -1, "withscores"],
      versionRead,
      ["time"],
    ]);
    nowMs = redisNowMs(time);
  } else {
    // Redis time first: the page and the count are of the entries not yet expired then.
    const [time, read] = await redis.pipeline([["time"], versionRead]);
    version = read;
    nowMs = redisNowMs(time);
    const live = `(${nowMs}`;
    let held: unknown;
    [members, held] = await redis.pipeline([
      ["zrange", key, live, "+inf", "byscore", "limit", 0, limit, "withscores"],
      ["zcount", key, live, "+inf"],
    ]);
    count = Number(held) || 0;
  }
  const entries: (string | { entry: string; ttl: number })[] = [];
  const flat = Array.isArray(members) ? members : [];
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const entry = String(flat[i]);
    const score = String(flat[i + 1]);
    if (score === "inf" || score === "+inf") entries.push(entry);
    else if (Number(score) > nowMs) entries.push({ entry, ttl: Math.ceil((Number(score) - nowMs) / 1000) });
  }
  return { version: Number(version ?? 0) || 0, count: count ?? entries.length, entries };
}

/** A change to write: the whole list (`replace`), or entries removed and then added (`patch`). */
export interface ListChange {
  kind: "replace" | "patch";
  add: readonly ListEntry[];
  remove: readonly ListEntry[];
}

/** What a write did: the entries the list holds and its new version; `refused` when it would hold too many. */
export type ListWritten =
  | { written: true; count: number; version: number }
  | { written: false; count: number };

/**
 * Stages the change's entries (in slices: a REST request has a size limit), then writes it in one script call
 * and raises the list's version. A failure before the script leaves the list as it was (the staged keys expire
 * on their own); the version is raised after the script, so a failure there leaves a written list that
 * isolates see at the next write: the request answers 503 and may be sent again.
 */
export async function writeList(
  redis: RedisPort,
  prefix: string,
  name: string,
  change: ListChange,
): Promise<ListWritten> {
  const key = listKey(prefix, name);
  const stage = `${key}:stage:${crypto.randomUUID()}`;
  const adds = `${stage}:add`;
  const removes = `${stage}:remove`;
  const nowMs = redisNowMs(await redis.send(["time"]));
  // One score per member: the latest expiry given for it wins (never = +inf).
  const scores = new Map<string, number>();
  for (const { member, ttlSeconds } of change.add) {
    const score = ttlSeconds === 0 ? Number.POSITIVE_INFINITY : nowMs + ttlSeconds * 1000;
    scores.set(member, Math.max(scores.get(member) ?? 0, score));
  }
  const members = [...scores];
  for (let from = 0; from < members.length; from += STAGE_CHUNK) {
    const zadd: (string | number)[] = ["zadd", adds];
    for (const [member, score] of members.slice(from, from + STAGE_CHUNK)) {
      zadd.push(score === Number.POSITIVE_INFINITY ? "+inf" : score, member);
    }
    await redis.pipeline([zadd, ["pexpire", adds, STAGE_TTL_MS]]);
  }
  const removed = [...new Set(change.remove.map((entry) => entry.member))];
  for (let from = 0; from < removed.length; from += STAGE_CHUNK) {
    const sadd: RedisCommand = ["sadd", removes, ...removed.slice(from, from + STAGE_CHUNK)];
    await redis.pipeline([sadd, ["pexpire", removes, STAGE_TTL_MS]]);
  }
  const reply = await redis.runScript(
    LIST_WRITE,
    [key, adds, removes, listLogKey(prefix, name)],
    [
      change.kind,
      String(nowMs),
      String(MAX_LIST_ENTRIES),
      crypto.randomUUID(),
      String(LIST_LOG_ITEMS),
      String(LIST_LOG_TTL_MS),
      String(LIST_LOG_MOST),
    ],
  );
  const [written, count] = Array.isArray(reply) ? reply.map(Number) : [0, 0];
  if (written !== 1) return { written: false, count: count ?? 0 };
  const version = Number(await redis.send(["hincrby", liveModeKey(prefix), listVersionField(name), 1]));
  return { written: true, count: count ?? 0, version };
}

/**
 * Deletes a list (a replace by nothing, so that its change log tells every isolate to drop it); returns its new
 * version.
 */
export async function deleteList(redis: RedisPort, prefix: string, name: string): Promise<number> {
  const written = await writeList(redis, prefix, name, { kind: "replace", add: [], remove: [] });
  return written.written ? written.version : 0;
}

/** Redis's `TIME` reply in ms. */
function redisNowMs(time: unknown): number {
  const [seconds, micros] = Array.isArray(time) ? time.map(Number) : [Number.NaN, 0];
  if (!Number.isFinite(seconds)) throw new Error("TIME: malformed reply");
  return (seconds as number) * 1000 + Math.floor((micros ?? 0) / 1000);
}
