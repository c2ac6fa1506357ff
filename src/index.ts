/**
 * Floodgate as a library: the Hono middleware with the same engine as the Worker (CONTRACT §7).
 *
 * @example
 * import { Hono, type MiddlewareHandler } from "hono";
 * import { rateLimit } from "floodgate";
 *
 * type Bindings = { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string };
 * const app = new Hono<{ Bindings: Bindings }>();
 * // Bindings arrive with the first request on Workers: build the limiter then, once per isolate.
 * let limiter: MiddlewareHandler<{ Bindings: Bindings }> | undefined;
 * app.use("/api/*", (c, next) => {
 *   limiter ??= rateLimit({
 *     redis: { url: c.env.UPSTASH_REDIS_REST_URL, token: c.env.UPSTASH_REDIS_REST_TOKEN },
 *     rules: [{ name: "per-key", key: "header:x-api-key", algorithm: "token-bucket", limit: 100, period: "1m", burst: 20 }],
 *   });
 *   return limiter(c, next);
 * });
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
