/**
 * Parses the Worker's bindings (README: "Configuration") once per isolate. Every binding may arrive as a string;
 * numbers and `RATE_LIMIT_RULES` also in their TOML types. An invalid binding throws a `ConfigError`
 * naming it; the Worker then answers 500 (never unlimited) and `npm run check-config` reports the same.
 */
import * as v from "valibot";
import { DEFAULTS } from "../engine/defaults";
import { FAILURES, type FailurePolicy, MODES, type Mode } from "../engine/types";
import type { Env } from "../env";
import { type RedisEndpoint, redisEndpoints, restTokensSchema, restUrlsSchema } from "./endpoints";
import { ConfigError, collecting, configErrorFrom } from "./errors";
import { MAX_LEASE_MS, ON_OFF } from "./fields";
import { parseRegions, type RegionSettings } from "./regions";
import type { ActionRule, RuleConfig } from "./rule-config";
import { parseRuleSet } from "./rules";
import {
  bearerSecret,
  claimValues,
  headerName,
  httpUrl,
  keyPrefix,
  MAX_TIMEOUT_MS,
  oneOf,
  stripPath,
  wholeMs,
} from "./settings";
import { unreadFields } from "./warnings";

export { DEFAULTS } from "../engine/defaults";
export { type RedisEndpoint, restTokenProblem, restUrlProblem } from "./endpoints";
export { ConfigError, collecting } from "./errors";
export { MAX_LEASE_MS, MAX_UNITS } from "./fields";
export { limitsFor } from "./limits";
export { LIST_NAME } from "./match-schema";
export { MIDDLEWARE_OPTIONS, type MiddlewareSettings, parseMiddlewareSettings } from "./middleware";
export { type RegionConfig, type RegionSettings, regionChooser } from "./regions";
export type {
  ActionRule,
  FactMatch,
  KeyPart,
  RuleConfig,
  RuleMatch,
  RuleSet,
  SettleSource,
  ShedConfig,
  TierLimits,
} from "./rule-config";
export { parseRuleSet, parseRules } from "./rules";
export { CF_FIELDS, type CfField } from "./source-fields";
export { headersRead } from "./sources";
export { clientChosenSources } from "./warnings";

/** Everything the Worker needs, validated, with defaults applied. */
export interface FloodgateConfig {
  /** `http://origin.invalid` where no proxy is needed (check-config of a library-only setup reports it). */
  originUrl: URL;
  /** Every endpoint `UPSTASH_REDIS_REST_URL` lists, in its order (docs/scaling-out.md). */
  redisEndpoints: RedisEndpoint[];
  /** The counting rules (those with an `algorithm`), in the order written. */
  rules: RuleConfig[];
  /** The action rules (`action = "deny" | "allow"`, docs/lists.md), each with its place among `rules`. */
  actions: ActionRule[];
  mode: Mode;
  failure: FailurePolicy;
  timeoutMs: number;
  /** `RATE_LIMIT_LEASES`: `off` = every request decided in Redis (docs/leases.md). */
  leases: (typeof ON_OFF)[number];
  /** `RATE_LIMIT_LEASE_MS`: the longest life of a lease, ms. */
  leaseMs: number;
  /** `RATE_LIMIT_REDIS_CLUSTER`: the endpoints are Redis Clusters (docs/scaling-out.md). */
  cluster: boolean;
  /** `RATE_LIMIT_REGIONS`, their databases and `RATE_LIMIT_REGION` (docs/regions.md). */
  regions: RegionSettings;
  /** `RATE_LIMIT_DASHBOARD_HINTS`: a masked hint beside each listed identity (docs/operating.md, "Hints"). */
  dashboardHints: boolean;
  originTimeoutMs: number;
  prefix: string;
  adminToken?: string;
  /** `RATE_LIMIT_METRICS_TOKEN`: opens `GET /__floodgate/metrics` only (docs/monitoring.md). */
  metricsToken?: string;
  clientIpHeader: string;
  jwtSecret?: string;
  jwksUrl?: URL;
  /** `RATE_LIMIT_JWT_AUDIENCE`: the `aud` a token must carry (any one of these). */
  jwtAudience?: string[];
  /** `RATE_LIMIT_JWT_ISSUER`: the `iss` a token must carry (any one of these). */
  jwtIssuer?: string[];
}

/** The shortest `RATE_LIMIT_METRICS_TOKEN` accepted, characters. */
const MIN_METRICS_TOKEN_LENGTH = 16;

/** The Redis endpoint bindings, also checked on their own: their pairing needs both valid. */
const redisSchema = v.object({
  UPSTASH_REDIS_REST_URL: restUrlsSchema,
  UPSTASH_REDIS_REST_TOKEN: restTokensSchema,
});

const bindingsSchema = v.object({
  ORIGIN_URL: v.optional(httpUrl("ORIGIN_URL")),
  ...redisSchema.entries,
  RATE_LIMIT_MODE: v.optional(oneOf("RATE_LIMIT_MODE", MODES), DEFAULTS.mode),
  RATE_LIMIT_FAILURE: v.optional(oneOf("RATE_LIMIT_FAILURE", FAILURES), DEFAULTS.failure),
  RATE_LIMIT_TIMEOUT_MS: v.optional(wholeMs("RATE_LIMIT_TIMEOUT_MS", MAX_TIMEOUT_MS), DEFAULTS.timeoutMs),
  ORIGIN_TIMEOUT_MS: v.optional(wholeMs("ORIGIN_TIMEOUT_MS", 600_000), DEFAULTS.originTimeoutMs),
  RATE_LIMIT_LEASES: v.optional(oneOf("RATE_LIMIT_LEASES", ON_OFF), DEFAULTS.leases),
  RATE_LIMIT_LEASE_MS: v.optional(wholeMs("RATE_LIMIT_LEASE_MS", MAX_LEASE_MS), DEFAULTS.leaseMs),
  RATE_LIMIT_REDIS_CLUSTER: v.optional(
    oneOf("RATE_LIMIT_REDIS_CLUSTER", ON_OFF),
    DEFAULTS.cluster ? "on" : "off",
  ),
  RATE_LIMIT_PREFIX: v.optional(keyPrefix("RATE_LIMIT_PREFIX"), DEFAULTS.prefix),
  RATE_LIMIT_DASHBOARD_HINTS: v.optional(oneOf("RATE_LIMIT_DASHBOARD_HINTS", ON_OFF), "off"),
  // A secret: messages never echo its value.
  RATE_LIMIT_ADMIN_TOKEN: v.optional(bearerSecret("RATE_LIMIT_ADMIN_TOKEN")),
  RATE_LIMIT_METRICS_TOKEN: v.optional(
    v.pipe(
      bearerSecret("RATE_LIMIT_METRICS_TOKEN"),
      v.check(
        (token) => token.length === 0 || token.length >= MIN_METRICS_TOKEN_LENGTH,
        `RATE_LIMIT_METRICS_TOKEN: shorter than ${MIN_METRICS_TOKEN_LENGTH} characters (its value is not shown): a scraper's token is guessable when short, e.g. \`openssl rand -base64 32\``,
      ),
    ),
  ),
  RATE_LIMIT_CLIENT_IP_HEADER: v.optional(headerName("RATE_LIMIT_CLIENT_IP_HEADER"), DEFAULTS.clientIpHeader),
  RATE_LIMIT_JWT_SECRET: v.optional(v.string("RATE_LIMIT_JWT_SECRET: expected a string")),
  RATE_LIMIT_JWKS_URL: v.optional(httpUrl("RATE_LIMIT_JWKS_URL")),
  RATE_LIMIT_JWT_AUDIENCE: v.optional(claimValues("RATE_LIMIT_JWT_AUDIENCE")),
  RATE_LIMIT_JWT_ISSUER: v.optional(claimValues("RATE_LIMIT_JWT_ISSUER")),
});

/** Empty strings (an unset `.dev.vars` line) count as unset. */
function presentBindings(env: Env): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value !== "" && value !== null && value !== undefined) out[name] = value;
  }
  return out;
}

/** Parses and validates every binding. Throws `ConfigError` naming the binding and field. */
export function parseEnv(
  env: Env,
  { requireOrigin = true }: { requireOrigin?: boolean } = {},
): FloodgateConfig {
  // Collect binding and rule errors together, so one run of check-config shows everything wrong.
  const problems: string[] = [];
  const present = presentBindings(env);
  const result = v.safeParse(bindingsSchema, present);
  if (!result.success) problems.push(...configErrorFrom("", result.issues.map(stripPath)).problems);
  // The URLs and tokens paired once both are valid themselves, whatever else is wrong.
  const redis = v.safeParse(redisSchema, present);
  const endpoints = redis.success
    ? collecting(problems, () =>
        redisEndpoints(redis.output.UPSTASH_REDIS_REST_URL, redis.output.UPSTASH_REDIS_REST_TOKEN),
      )
    : undefined;
  if (requireOrigin && present.ORIGIN_URL === undefined) {
    problems.push("ORIGIN_URL: required (where allowed requests go, e.g. https://origin.example.com)");
  }
  const ruleSet = collecting(problems, () =>
    parseRuleSet(rulesFrom(env.RATE_LIMIT_RULES), {
      label: "RATE_LIMIT_RULES",
      jwtVerifiable: Boolean(env.RATE_LIMIT_JWT_SECRET) || Boolean(env.RATE_LIMIT_JWKS_URL),
    }),
  );
  const regions = collecting(problems, () => parseRegions(present));
  if (!result.success || !endpoints || !ruleSet || !regions || problems.length > 0)
    throw new ConfigError(problems);
  const b = result.output;
  return {
    originUrl: new URL(b.ORIGIN_URL ?? "http://origin.invalid"),
    redisEndpoints: endpoints,
    rules: ruleSet.rules,
    actions: ruleSet.actions,
    mode: b.RATE_LIMIT_MODE,
    failure: b.RATE_LIMIT_FAILURE,
    timeoutMs: b.RATE_LIMIT_TIMEOUT_MS,
    leases: b.RATE_LIMIT_LEASES,
    cluster: b.RATE_LIMIT_REDIS_CLUSTER === "on",
    regions,
    dashboardHints: b.RATE_LIMIT_DASHBOARD_HINTS === "on",
    leaseMs: b.RATE_LIMIT_LEASE_MS,
    originTimeoutMs: b.ORIGIN_TIMEOUT_MS,
    prefix: b.RATE_LIMIT_PREFIX,
    adminToken: b.RATE_LIMIT_ADMIN_TOKEN,
    metricsToken: b.RATE_LIMIT_METRICS_TOKEN || undefined,
    clientIpHeader: b.RATE_LIMIT_CLIENT_IP_HEADER,
    jwtSecret: b.RATE_LIMIT_JWT_SECRET,
    jwksUrl: b.RATE_LIMIT_JWKS_URL === undefined ? undefined : new URL(b.RATE_LIMIT_JWKS_URL),
    jwtAudience: b.RATE_LIMIT_JWT_AUDIENCE,
    jwtIssuer: b.RATE_LIMIT_JWT_ISSUER,
  };
}

/** What of valid `RATE_LIMIT_RULES` no algorithm reads, for check-config's warnings (`unreadFields`). */
export function unreadRuleFields(env: Env): string[] {
  return unreadFields(rulesFrom(env.RATE_LIMIT_RULES), "RATE_LIMIT_RULES");
}

/** `RATE_LIMIT_RULES` is a TOML array of tables (already an array) or the same as a JSON string. */
function rulesFrom(value: unknown): unknown[] {
  if (value === undefined || value === "")
    throw new ConfigError("RATE_LIMIT_RULES: required (at least one rule)");
  if (typeof value !== "string") {
    if (Array.isArray(value)) return value;
    throw new ConfigError(
      "RATE_LIMIT_RULES: expected an array of rules (a TOML array of tables, or a JSON array)",
    );
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch (error) {
    throw new ConfigError(`RATE_LIMIT_RULES: not valid JSON (${(error as Error).message})`);
  }
  if (!Array.isArray(parsed)) throw new ConfigError("RATE_LIMIT_RULES: expected a JSON array of rules");
  return parsed;
}
