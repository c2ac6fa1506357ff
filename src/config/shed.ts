/**
 * A `shed` rule's priority classes (docs/algorithms.md, "Priority load shedding"), checked, and the shed
 * fields refused on every other rule.
 */
import type * as v from "valibot";
import { namesWith, traitsOf } from "../engine/algorithms";
import { ConfigError } from "./errors";
import type { ShedConfig } from "./rule-config";
import type { ruleSchema } from "./schema";
import { parseKey } from "./sources";

/**
 * Default sub-keys of a `shed` rule: one per 10 requests of capacity, at most 16 (docs/algorithms.md,
 * "Priority load shedding").
 */
const defaultShards = (capacity: number): number => Math.max(1, Math.min(16, Math.floor(capacity / 10)));

/** A `shed` rule's classes, checked; `undefined` for other rules (which may not use the shed fields). */
export function shedConfig(rule: v.InferOutput<typeof ruleSchema>, at: string): ShedConfig | undefined {
  if (!traitsOf(rule.algorithm).takesPriorities) {
    const foreign = (["priority", "priorities", "shards"] as const).filter(
      (field) => rule[field] !== undefined,
    );
    if (foreign.length > 0) {
      throw new ConfigError(
        foreign.map((field) => `${at}.${field}: only ${namesWith("takesPriorities")} rules have ${field}`),
      );
    }
    return undefined;
  }
  if (rule.priority === undefined || rule.priorities === undefined) {
    throw new ConfigError([
      ...(rule.priority === undefined
        ? [`${at}.priority: required for shed (e.g. "header:x-priority" or "method")`]
        : []),
      ...(rule.priorities === undefined
        ? [`${at}.priorities: required for shed (e.g. { critical = 1.0, get = 0.8 })`]
        : []),
    ]);
  }
  const shards = rule.shards ?? defaultShards(rule.limit);
  if (shards > rule.limit) {
    throw new ConfigError(
      `${at}.shards: ${shards} sub-keys for a capacity of ${rule.limit} leave some with none`,
    );
  }
  const classes = rule.priorities;
  const fallback = Object.keys(classes).reduce((a, b) => ((classes[b] ?? 1) < (classes[a] ?? 1) ? b : a));
  return {
    priority: rule.priority === "method" ? "method" : parseKey(rule.priority),
    priorityText: Array.isArray(rule.priority) ? rule.priority.join("|") : rule.priority,
    classes: rule.priority === "method" ? upperCaseKeys(classes) : classes,
    fallback: rule.priority === "method" ? fallback.toUpperCase() : fallback,
    shards,
  };
}

const upperCaseKeys = (r: Record<string, number>): Record<string, number> =>
  Object.fromEntries(Object.entries(r).map(([k, share]) => [k.toUpperCase(), share]));
