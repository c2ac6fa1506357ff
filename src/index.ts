/**
 * Floodgate as a library: the Hono middleware with the same engine as the Worker (CONTRACT §7).
 *
 * @example
 * import { Hono } from "hono";
 * import { rateLimit } from "floodgate";
 *
 * const app = new Hono<{ Bindings: { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string } }>();
 * app.use("/api/*", (c, next) =>
 *   rateLimit({ redis: { url: c.env.UPSTASH_REDIS_REST_URL, token: c.env.UPSTASH_REDIS_REST_TOKEN }, rules })(c, next));
 */
export { ConfigError, type RuleConfig } from "./config";
export { createStore, type Store, type StoreOptions } from "./engine/store";
export type { Algorithm, Decider, Decision, FailurePolicy, Mode, RuleCall, RuleResult } from "./engine/types";
export {
  type CostFunction,
  type DecisionEvent,
  type KeyFunction,
  type KeySource,
  type Period,
  type RateLimitOptions,
  type RuleOptions,
  rateLimit,
} from "./middleware";
export { createDecider, type DeciderOptions } from "./resilience/decider";
export type { LiveModes } from "./rules/modes";
