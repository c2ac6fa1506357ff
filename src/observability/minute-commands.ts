/**
 * The commands that write one minute's counts (minute-counts.ts) into its keys (metric-keys.ts): HINCRBY for
 * the counts, ZINCRBY for the top denied identities and paths, one ZADD GT / LT for the peaks and the closest
 * to their limit, and each key's EXPIRE the first time this isolate writes it.
 */
import type { RedisCommand } from "../engine/redis";
import { hintField, hintsKey, METRICS_TTL_SECONDS, metricsKeys } from "./metric-keys";
import type { MinuteCounts } from "./minute-counts";

/** Identities per rule sent per flush (top denied, and closest to their limit). */
export const METRICS_TOP_PER_FLUSH = 5;

/**
 * Appends the commands writing `counts` (of `minute`) to `pipeline`.
 * @param expire whether a key still needs its EXPIRE (false: this isolate already gave it its TTL)
 */
export function minuteCommands(
  pipeline: RedisCommand[],
  prefix: string,
  minute: number,
  counts: MinuteCounts,
  expire: (key: string) => boolean,
): void {
  const keys = metricsKeys(prefix, minute);
  const expiring = (key: string) => {
    if (expire(key)) pipeline.push(["expire", key, METRICS_TTL_SECONDS]);
  };
  // The hints of the identities this flush lists (top denied, closest to their limit), never of the others.
  const hints: string[] = [];
  const hinting = (rule: string, identity: string) => {
    const hint = counts.hints.get(rule)?.get(identity);
    if (hint !== undefined) hints.push(hintField(rule, identity), hint);
  };
  for (const [field, count] of counts.counts) pipeline.push(["hincrby", keys.counts, field, count]);
  expiring(keys.counts);
  for (const [rule, identities] of counts.denied) {
    for (const [identity, count] of top(identities, (a, b) => b - a)) {
      pipeline.push(["zincrby", keys.denied(rule), count, identity]);
      hinting(rule, identity);
    }
    expiring(keys.denied(rule));
  }
  for (const [rule, identities] of counts.peak) {
    const members = [...identities].flatMap(([member, demand]) => [demand, member]);
    if (members.length === 0) continue;
    // GT keeps each identity's highest demand across isolates; one ZADD carries every member.
    pipeline.push(["zadd", keys.peak(rule), "gt", ...members]);
    expiring(keys.peak(rule));
  }
  for (const [rule, routes] of counts.paths) {
    for (const [route, count] of top(routes, (a, b) => b - a)) {
      pipeline.push(["zincrby", keys.paths(rule), count, route]);
    }
    expiring(keys.paths(rule));
  }
  for (const [rule, identities] of counts.settled) {
    if (identities.size === 0) continue;
    pipeline.push(["hset", keys.settled(rule), ...[...identities].flat()]);
    expiring(keys.settled(rule));
  }
  for (const [rule, identities] of counts.near) {
    const nearest = top(identities, (a, b) => a - b);
    for (const [identity] of nearest) hinting(rule, identity);
    const members = nearest.flatMap(([member, score]) => [score, member]);
    if (members.length === 0) continue;
    // LT keeps each identity's lowest remaining across isolates; one ZADD carries every member.
    pipeline.push(["zadd", keys.near(rule), "lt", ...members]);
    expiring(keys.near(rule));
  }
  if (hints.length > 0) {
    const key = hintsKey(prefix, Math.floor(minute / 60));
    pipeline.push(["hset", key, ...hints]);
    expiring(key);
  }
}

const top = (identities: Map<string, number>, order: (a: number, b: number) => number) =>
  [...identities].sort((a, b) => order(a[1], b[1])).slice(0, METRICS_TOP_PER_FLUSH);
