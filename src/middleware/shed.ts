/**
 * Priority load shedding (docs/algorithms.md, "Priority load shedding"): a `shed` rule is a budget of requests in flight
 * for the origin as a whole, split over `shards` sub-keys so that no single Redis key is touched by every
 * request (Upstash locks keys: one hot key would serialize the fleet). A request takes one sub-key at
 * random and may hold a slot there only while fewer than its class's share of that sub-key's capacity is
 * held; the script counts the slots (a concurrency set per sub-key).
 */
import type { RuleConfig, ShedConfig } from "../config";
import { identityOfKey, type RequestFacts } from "../identity";

/** What one request gets under a shed rule. */
export interface ShedPlan {
  /** The request's priority class (the rule's lowest when it has none or an unknown one). */
  priorityClass: string;
  /** The sub-key it counts against, 0..shards-1. */
  shard: number;
  /** Slots of that sub-key its class may fill: ⌊sub-key capacity × class share⌋. */
  limit: number;
}

/** The request's class, sub-key and limit under `rule` (capacity after tier = `capacity`). */
export async function shedPlan(
  rule: RuleConfig & { shed: ShedConfig },
  method: string,
  request: RequestFacts,
  capacity: number,
): Promise<ShedPlan> {
  const { shed } = rule;
  const value = shed.priority === "method" ? method : await identityOfKey(shed.priority, request);
  const priorityClass = value !== undefined && Object.hasOwn(shed.classes, value) ? value : shed.fallback;
  const shard = Math.floor(Math.random() * shed.shards);
  const limit = classSlots(subKeyCapacity(capacity, shed.shards, shard), shed.classes[priorityClass] ?? 0);
  return { priorityClass, shard, limit };
}

/**
 * Slots of sub-key `shard` when `capacity` is split over `shards`: as evenly as whole slots allow, the first
 * `capacity % shards` sub-keys getting one more.
 */
export const subKeyCapacity = (capacity: number, shards: number, shard: number): number =>
  Math.floor(capacity / shards) + (shard < capacity % shards ? 1 : 0);

/** Slots of one sub-key a class may fill: ⌊sub-key capacity × share⌋. */
export const classSlots = (subCapacity: number, share: number): number =>
  // +1e-9: 10 × 0.7 is 7.000000000000001 in doubles, and 100 × 0.29 is 28.999999999999996.
  Math.floor(subCapacity * share + 1e-9);

/**
 * The most requests of a class with `share` admitted in flight, all sub-keys together: the sum of what each
 * sub-key admits, i.e. the in-flight count the class is shed above, as `GET /__floodgate/rules` and the
 * dashboard show it. ⌊capacity × share⌋ would overstate it wherever the split leaves a fraction on more than
 * one sub-key (35 over 3 sub-keys at 0.7: 8 + 8 + 7 = 23, not 24).
 */
export function shedAbove(capacity: number, shards: number, share: number): number {
  let total = 0;
  for (let shard = 0; shard < shards; shard++) {
    total += classSlots(subKeyCapacity(capacity, shards, shard), share);
  }
  return total;
}

/** The identity of one sub-key: the rule's identity (usually `global`) and the sub-key's number. */
export const shardIdentity = (identity: string, shard: number): string => `${identity}#${shard}`;
