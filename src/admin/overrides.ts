/**
 * Per-identity overrides in Redis (docs/scaling-out.md): a hash at `<prefix>:override:<rule>:{<hash>}` with fields
 * `limit`, `period` (ms) and `burst`, read by the decision script in the same call as the limit it changes,
 * once the deciding isolate knows it exists (src/live/overrides.ts: the override index, written before the
 * override). Override keys carry no TTL unless the operator gave one: the `ttl` is the
 * override's own lifetime, independent of the rule's period.
 */
import { identityHashOf, overrideKey, overrideKeyPrefix } from "../engine/keys";
import type { RedisCommand, RedisPort } from "../engine/redis";
import { fieldMap } from "../live/modes";
import { overrideIndexKey, overrideIndexMember } from "../live/overrides";
import { type Deadline, NO_DEADLINE } from "../util/deadline";

/** One override as stored and shown. */
export interface Override {
  limit: number;
  /** Absent: the rule's own period applies. */
  periodMs?: number;
  /** Token-bucket capacity / GCRA burst; set to `limit` when the operator gave none. */
  burst: number;
}

/** An override with the time it has left. */
export interface StoredOverride extends Override {
  /** Seconds until the override expires; `null` = it lasts until deleted. */
  ttlSeconds: number | null;
}

/** Where one identity's override lives under one rule. */
export interface OverrideTarget {
  prefix: string;
  rule: string;
  identityHash: string;
}

/**
 * Lists the identity in the override index, then replaces the whole override in one transaction (a reader
 * never sees half of an old and half of a new one). Two steps, not one MULTI: on a Redis Cluster the index and
 * the override live in different slots; in this order an override never exists unlisted. With `ttlSeconds`
 * the key expires then; without, it lasts until deleted. With several databases the override lives on its
 * identity's endpoint (`redis`) and the index on the first (`indexRedis`). Past the `deadline`, the
 * override is not written.
 */
export async function putOverride(
  target: OverrideTarget,
  override: Override,
  ttlSeconds: number | undefined,
  redis: RedisPort,
  indexRedis: RedisPort = redis,
  deadline: Deadline = NO_DEADLINE,
) {
  const key = overrideKey(target.prefix, target.rule, target.identityHash);
  const fields: RedisCommand = ["limit", override.limit, "burst", override.burst];
  const period: RedisCommand = override.periodMs === undefined ? [] : ["period", override.periodMs];
  await deadline.within(() =>
    indexRedis.send([
      "sadd",
      overrideIndexKey(target.prefix),
      overrideIndexMember(target.rule, target.identityHash),
    ]),
  );
  const tx: RedisCommand[] = [
    ["del", key],
    ["hset", key, ...fields, ...period],
  ];
  if (ttlSeconds !== undefined) tx.push(["expire", key, ttlSeconds]);
  await deadline.within(() => redis.multi(tx));
}

/** Reads one override, or `null` when there is none. */
export async function getOverride(key: string, redis: RedisPort): Promise<StoredOverride | null> {
  const [fields, ttl] = await redis.pipeline([
    ["hgetall", key],
    ["ttl", key],
  ]);
  return toStoredOverride(fieldMap(fields), Number(ttl));
}

/**
 * Removes one override, then its index entry (separate commands: different slots on a Redis Cluster; in this
 * order an override never exists unlisted); `true` if there was one. Past the `deadline`, the index entry
 * stays (a listed identity without an override is harmless).
 */
export async function deleteOverride(
  target: OverrideTarget,
  redis: RedisPort,
  indexRedis: RedisPort = redis,
  deadline: Deadline = NO_DEADLINE,
): Promise<boolean> {
  const key = overrideKey(target.prefix, target.rule, target.identityHash);
  const deleted = await deadline.within(() => redis.send(["del", key]));
  await deadline.within(() =>
    indexRedis.send([
      "srem",
      overrideIndexKey(target.prefix),
      overrideIndexMember(target.rule, target.identityHash),
    ]),
  );
  return Number(deleted) > 0;
}

/** One page of a rule's overrides. */
export interface OverridePage {
  items: Array<StoredOverride & { identityHash: string }>;
  /** Pass back as `cursor` for the next page; `null` after the last page. */
  nextCursor: string | null;
}

/** Keys a page's SCAN calls examine at first; halved while a batch would overflow the page. */
const SCAN_COUNT = 1000;
/** SCAN calls one page may make before it answers with what it has (bounds an admin call's duration). */
const MAX_SCANS_PER_PAGE = 50;

/**
 * Lists a rule's overrides with `SCAN` (never `KEYS`, which blocks Redis), at most `pageSize` per page.
 * A SCAN batch is never split across pages: replaying a cursor to skip part of its batch is unsafe, since
 * Redis may answer the same cursor with other keys once the keyspace changed (parallel writers, expiring
 * keys, rehashing). A batch that would overflow the page starts the next page instead; one that alone holds
 * more than a page is asked for again from the same cursor with smaller COUNTs. So SCAN's guarantee
 * carries over: an override present for the whole listing is listed; one added or removed meanwhile may or
 * may not be.
 */
export async function listOverrides(
  redis: RedisPort,
  prefix: string,
  rule: string,
  cursor: string,
  pageSize: number,
): Promise<OverridePage> {
  // `{` and `}` are literal in a SCAN pattern; the prefix is escaped for the glob characters it may hold.
  const match = `${escapeGlob(overrideKeyPrefix(prefix, rule))}{*}`;
  const page = await scanPage(redis, match, cursor, pageSize);
  return { items: await details(redis, page.keys), nextCursor: page.nextCursor };
}

/**
 * One page of the keys matching `match`, at most `pageSize`, from a SCAN `cursor`, and the cursor of the next
 * page (`null` after the last), as {@link listOverrides} describes.
 */
export async function scanPage(
  redis: RedisPort,
  match: string,
  cursor: string,
  pageSize: number,
): Promise<{ keys: string[]; nextCursor: string | null }> {
  let scanCursor = cursor;
  let count = SCAN_COUNT;
  const keys: string[] = [];
  for (let scans = 0; scans < MAX_SCANS_PER_PAGE; scans++) {
    const [next, batch] = (await redis.send(["scan", scanCursor, "match", match, "count", count])) as [
      unknown,
      unknown[],
    ];
    if (keys.length + batch.length > pageSize) {
      // COUNT bounds the keys SCAN visits (matching or not, whole hash buckets): ask the same cursor for
      // fewer. Only a page smaller than one bucket's matches takes a batch that overflows it.
      if (count > 1) {
        count = Math.max(1, Math.floor(count / 2));
        continue;
      }
      if (keys.length > 0) break; // this batch opens the next page, whole
    }
    keys.push(...batch.map(String));
    scanCursor = String(next);
    if (scanCursor === "0") return { keys, nextCursor: null };
    if (keys.length >= pageSize) break;
  }
  return { keys, nextCursor: scanCursor };
}

/**
 * True for a cursor `listOverridesOf` can continue from over `endpointCount` endpoints: a SCAN cursor, with
 * `<endpoint index>-` first only when there are several (one endpoint's SCAN would refuse that form).
 */
export function isCursor(cursor: string, endpointCount: number): boolean {
  const parts = /^(?:(\d{1,3})-)?\d{1,20}$/.exec(cursor);
  if (!parts) return false;
  const endpoint = parts[1];
  return endpoint === undefined || (endpointCount > 1 && Number(endpoint) < endpointCount);
}

/**
 * Lists a rule's overrides over every endpoint, one after the other: one endpoint's SCAN to its end, then the
 * next one's. With several endpoints the cursor is `<endpoint index>-<SCAN cursor>`; with one it is the SCAN
 * cursor itself, as {@link listOverrides} gives it.
 */
export function listOverridesOf(
  endpoints: readonly RedisPort[],
  prefix: string,
  rule: string,
  cursor: string,
  pageSize: number,
): Promise<OverridePage> {
  return pageOver(endpoints, cursor, pageSize, (redis, scan, size) =>
    listOverrides(redis, prefix, rule, scan, size),
  );
}

/**
 * A listing over every endpoint, one after the other (`listOne` pages through one endpoint's SCAN): one
 * endpoint's to its end, then the next one's. With several endpoints the cursor is `<endpoint index>-<SCAN
 * cursor>`; with one it is the SCAN cursor itself.
 */
export async function pageOver<T>(
  endpoints: readonly RedisPort[],
  cursor: string,
  pageSize: number,
  listOne: (
    redis: RedisPort,
    cursor: string,
    pageSize: number,
  ) => Promise<{ items: T[]; nextCursor: string | null }>,
): Promise<{ items: T[]; nextCursor: string | null }> {
  if (endpoints.length === 1) return listOne(endpoints[0] as RedisPort, cursor, pageSize);
  const dash = cursor.indexOf("-");
  let at = dash < 0 ? 0 : Number(cursor.slice(0, dash));
  let scan = dash < 0 ? cursor : cursor.slice(dash + 1);
  const items: T[] = [];
  while (at < endpoints.length) {
    const page = await listOne(endpoints[at] as RedisPort, scan, pageSize - items.length);
    items.push(...page.items);
    if (page.nextCursor !== null) return { items, nextCursor: `${at}-${page.nextCursor}` };
    at++;
    scan = "0";
    if (items.length >= pageSize) break;
  }
  return { items, nextCursor: at < endpoints.length ? `${at}-0` : null };
}

async function details(redis: RedisPort, keys: string[]): Promise<OverridePage["items"]> {
  if (keys.length === 0) return [];
  const replies = await redis.pipeline(
    keys.flatMap((key) => [
      ["hgetall", key],
      ["ttl", key],
    ]),
  );
  const items: OverridePage["items"] = [];
  keys.forEach((key, i) => {
    const stored = toStoredOverride(fieldMap(replies[2 * i]), Number(replies[2 * i + 1]));
    const identityHash = identityHashOf(key);
    // Deleted or expired between SCAN and read: not an override any more.
    if (stored && identityHash !== undefined) items.push({ identityHash, ...stored });
  });
  return items;
}

function toStoredOverride(fields: Record<string, unknown>, ttl: number): StoredOverride | null {
  if (fields.limit === undefined) return null;
  const limit = Number(fields.limit);
  const stored: StoredOverride = {
    limit,
    burst: Number(fields.burst ?? limit),
    ttlSeconds: ttl >= 0 ? ttl : null,
  };
  if (fields.period !== undefined) stored.periodMs = Number(fields.period);
  return stored;
}

/** Escapes Redis glob characters, so a prefix like `rl*` matches only itself. */
export const escapeGlob = (text: string): string => text.replace(/[*?[\]\\]/g, "\\$&");
