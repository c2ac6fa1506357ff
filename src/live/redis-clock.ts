/**
 * Redis's clock as this isolate reads it: time comes from Redis (`TIME`), never from the edge node's clock. One
 * `TIME` gives the offset between Redis's clock and the isolate's (half its round trip taken as the way there),
 * kept for ten minutes per port, so a deadline written by Redis's clock (a live global switch's end, modes.ts)
 * is written and judged by it, whichever isolate writes or reads it. Asked only where such a deadline is.
 */
import type { RedisPort } from "../engine/redis";

/** How long one measured offset is used, ms: clocks drift far less than a second in that time. */
const OFFSET_MAX_AGE_MS = 10 * 60_000;

const offsets = new WeakMap<RedisPort, { offsetMs: number; measuredAtMs: number }>();

/** Redis's time now, ms since the epoch: the isolate's clock plus the offset last measured with `TIME`. */
export async function redisNowMs(redis: RedisPort): Promise<number> {
  const known = offsets.get(redis);
  if (known && Date.now() - known.measuredAtMs < OFFSET_MAX_AGE_MS) return Date.now() + known.offsetMs;
  const sentMs = Date.now();
  const reply = (await redis.send(["time"])) as [string | number, string | number];
  const receivedMs = Date.now();
  const redisMs = Number(reply[0]) * 1000 + Math.floor(Number(reply[1]) / 1000);
  const offsetMs = redisMs - (sentMs + receivedMs) / 2;
  offsets.set(redis, { offsetMs, measuredAtMs: receivedMs });
  return receivedMs + offsetMs;
}
