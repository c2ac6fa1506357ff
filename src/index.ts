/**
 * Floodgate as a library (`hono-floodgate` on npm): the Hono middleware with the same engine as the
 * Worker. The README's "Using Floodgate as a Hono middleware" shows installing and running it.
 *
 * @example
 * import { Hono } from "hono";
 * import { rateLimit } from "hono-floodgate";
 *
 * type Bindings = { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string };
 * const app = new Hono<{ Bindings: Bindings }>();
 * // A function of the context: called once, on the first request, when Workers' bindings are known.
 * app.use("/api/*", rateLimit((c) => ({
 *   redis: { url: c.env.UPSTASH_REDIS_REST_URL, token: c.env.UPSTASH_REDIS_REST_TOKEN },
 *   rules: [{ name: "per-key", key: "header:x-api-key", algorithm: "token-bucket", limit: 100, period: "1m", burst: 20 }],
 * })));
 * app.get("/api/hello", (c) => c.json({ remaining: c.get("rateLimit")?.remaining }));
 */
export { ConfigError, type RuleConfig } from "./config";
export { createStore, type Store, type StoreOptions } from "./engine/store";
export type {
  Algorithm,
  Decider,
  Decision,
  FailurePolicy,
  Mode,
  RuleCall,
  RuleResult,
  Source,
} from "./engine/types";
export {
  type CostFunction,
  type DecisionEvent,
  InvalidCostError,
  type KeyFunction,
  type KeySource,
  LoadShedError,
  MissingIdentityError,
  type Period,
  QuotaExceededError,
  type RateLimitInfo,
  type RateLimitOptions,
  ReducedCapacityError,
  type RuleOptions,
  rateLimit,
} from "./middleware";
export { createDecider, type DeciderOptions } from "./resilience/decider";
export type { LiveModes } from "./rules/modes";
export { ProblemError, problemResponse } from "./util/problem";
