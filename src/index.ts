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
// Every type an exported signature uses is exported too (as a type only where the value is internal), so an
// app can name it: `ResilientDecider` from `createDecider`, `DeciderHealth` from its `health()`, and so on.
export type { StatusCount } from "./config/count";
export { ConfigError } from "./config/errors";
export type {
  FactMatch,
  KeyPart,
  RuleConfig,
  RuleMatch,
  SettleSource,
  ShedConfig,
  TierLimits,
} from "./config/rule-config";
export type { CfField } from "./config/source-fields";
export type { CallBudget, RedisArg, RedisCommand, RedisPort, RedisScript } from "./engine/redis";
export type { CallOptions } from "./engine/script";
export { createStore, type Store, type StoreErrorKind, type StoreOptions } from "./engine/store";
export type {
  Algorithm,
  DecideOptions,
  Decider,
  Decision,
  DegradedReason,
  FailurePolicy,
  LeaseGrant,
  Mode,
  Outcome,
  RefundCall,
  Reservation,
  RuleCall,
  RuleResult,
  SettledUnits,
  Settlement,
  Source,
  WaitUntil,
} from "./engine/types";
export type {
  JwksHealth,
  JwksUnavailableError,
  JwtOptions,
  JwtVerifier,
  JwtVerifierFactory,
} from "./identity/jwt";
export type { IdentityOptions, RequestFacts } from "./identity/request";
export type { OverrideIndex } from "./live/overrides";
export {
  type ActionRuleOptions,
  type CostAboveCapacity,
  type CostFunction,
  type DecisionEvent,
  DeniedByRuleError,
  type FloodgateVariables,
  InvalidCostError,
  type KeyFunction,
  type KeySource,
  LoadShedError,
  type MiddlewareJwtOptions,
  MissingIdentityError,
  type Period,
  QuotaExceededError,
  type RateLimitInfo,
  type RateLimitOptions,
  ReducedCapacityError,
  type RuleOptions,
  rateLimit,
  type SettledRule,
  type SettleEvent,
} from "./middleware";
export type { BreakerOptions, BreakerState } from "./resilience/breaker";
export {
  createDecider,
  type DeciderHealth,
  type DeciderOptions,
  type DecisionStore,
  type ResilientDecider,
} from "./resilience/decider";
export type { CfFacts } from "./rules/match";
export type { LiveModes } from "./rules/modes";
export type { AddressBits } from "./util/address";
export type { CalendarBounds, CalendarPeriod, CalendarSpec, CalendarUnit } from "./util/calendar";
export { ProblemError, problemResponse } from "./util/problem";
export type { RunningTimer } from "./util/timer";
