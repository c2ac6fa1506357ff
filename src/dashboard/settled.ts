/**
 * The dashboard's reads of per-minute metrics keys, with a per-isolate cache for minutes that have settled.
 */
import type { RedisCommand, RedisPort } from "../engine/redis";

/** One key to read, the minute it belongs to, and the command that reads it. */
export interface Read {
  key: string;
  minute: number;
  command: (key: string) => RedisCommand;
}

/**
 * Replies for minutes at least this old are kept per isolate for `SETTLED_CACHE_MS`: isolates flush within
 * seconds, so an open page re-reads only the last two minutes (a late flush of an idle isolate shows up
 * within a minute).
 */
const SETTLED_AFTER_MINUTES = 2;
const SETTLED_CACHE_MS = 60_000;
const settledReplies = new WeakMap<object, Map<string, { reply: unknown; minute: number; atMs: number }>>();

/**
 * The replies to `reads`, in order: settled minutes from this isolate's cache, the rest in one pipeline.
 * Cached minutes older than `horizonMinutes` are dropped.
 */
export async function readSettled(
  redis: RedisPort,
  reads: Read[],
  nowMinute: number,
  horizonMinutes: number,
): Promise<unknown[]> {
  let cache = settledReplies.get(redis);
  if (!cache) {
    cache = new Map();
    settledReplies.set(redis, cache);
  }
  const nowMs = Date.now();
  for (const [key, entry] of cache) {
    if (entry.minute <= nowMinute - horizonMinutes || nowMs - entry.atMs >= SETTLED_CACHE_MS)
      cache.delete(key);
  }
  const replies: unknown[] = new Array(reads.length);
  const missing: number[] = [];
  const pipeline: RedisCommand[] = [];
  reads.forEach((read, i) => {
    const hit = cache.get(read.key);
    if (hit) replies[i] = hit.reply;
    else {
      pipeline.push(read.command(read.key));
      missing.push(i);
    }
  });
  if (missing.length === 0) return replies;
  const fetched = await redis.pipeline(pipeline);
  missing.forEach((i, j) => {
    const read = reads[i] as Read;
    replies[i] = fetched[j];
    if (read.minute <= nowMinute - SETTLED_AFTER_MINUTES) {
      cache.set(read.key, { reply: fetched[j], minute: read.minute, atMs: nowMs });
    }
  });
  return replies;
}
