/**
 * Priority load shedding (README: "Priority load shedding"): a `shed` rule is a budget of requests in flight
 * for the origin as a whole, split over `shards` sub-keys so that no single Redis key is touched by every
 * request (Upstash locks keys: one hot key would serialize the fleet). A request takes one sub-key at
 * random and may hold a slot there only while fewer than its class's share of that sub-key's capacity is
 * held; the script counts the slots (a concurrency set per sub-key).
 */
import type { RuleConfig, ShedConfig } from "../config";
import { identityOfKey, type RequestIdentity } from "../identity";

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
  request: RequestIdentity,
  capacity: number,
): Promise<ShedPlan> {
  const { shed } = rule;
  const value = shed.priority === "method" ? method : await identityOfKey(shed.priority, request);
  const priorityClass = value !== undefined && Object.hasOwn(shed.classes, value) ? value : shed.fallback;
  const shard = Math.floor(Math.random() * shed.shards);
  // The capacity split as evenly as whole slots allow: the first `capacity % shards` sub-keys get one more.
  const subCapacity = Math.floor(capacity / shed.shards) + (shard < capacity % shed.shards ? 1 : 0);
  // +1e-9: 10 × 0.7 is 7.000000000000001 in doubles, and 100 × 0.29 is 28.999999999999996.
  const limit = Math.floor(subCapacity * (shed.classes[priorityClass] ?? 0) + 1e-9);
  return { priorityClass, shard, limit };
}

/** The identity of one sub-key: the rule's identity (usually `global`) and the sub-key's number. */
export const shardIdentity = (identity: string, shard: number): string => `${identity}#${shard}`;
