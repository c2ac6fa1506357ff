/**
 * `rateLimit()`'s settings (src/middleware/index.ts), checked by the same rules as the Worker's bindings
 * they mirror (src/config/settings.ts), with the same defaults (src/engine/defaults.ts).
 */
import * as v from "valibot";
import { DEFAULTS } from "../engine/defaults";
import { FAILURES, MODES } from "../engine/types";
import { configErrorFrom } from "./errors";
import { MAX_LEASE_MS, ON_OFF } from "./schema";
import { headerName, keyPrefix, MAX_TIMEOUT_MS, oneOf, stripPath, wholeMs } from "./settings";

/**
 * The settings among the options, each checked: a `mode: "ON"` from untyped code is an error, never a
 * limiter that silently only monitors.
 */
const middlewareSettingsSchema = v.object({
  mode: v.optional(oneOf("mode", MODES), DEFAULTS.mode),
  failure: v.optional(oneOf("failure", FAILURES), DEFAULTS.failure),
  timeoutMs: v.optional(wholeMs("timeoutMs", MAX_TIMEOUT_MS), DEFAULTS.timeoutMs),
  prefix: v.optional(keyPrefix("prefix"), DEFAULTS.prefix),
  clientIpHeader: v.optional(headerName("clientIpHeader"), DEFAULTS.clientIpHeader),
  leases: v.optional(oneOf("leases", ON_OFF), DEFAULTS.leases),
  leaseMs: v.optional(wholeMs("leaseMs", MAX_LEASE_MS), DEFAULTS.leaseMs),
  cluster: v.optional(v.boolean("cluster: expected true or false"), false),
});

/** The middleware's settings, validated, defaults applied. */
export type MiddlewareSettings = v.InferOutput<typeof middlewareSettingsSchema>;

/**
 * Validates `rateLimit()`'s settings (other options are ignored here) and applies the defaults.
 * @throws {ConfigError} naming every option that is wrong
 */
export function parseMiddlewareSettings(options: object): MiddlewareSettings {
  const result = v.safeParse(middlewareSettingsSchema, options);
  if (!result.success) throw configErrorFrom("", result.issues.map(stripPath));
  return result.output;
}
