/**
 * `rateLimit()`'s settings (src/middleware/index.ts), checked by the same rules as the Worker's bindings
 * they mirror (src/config/settings.ts), with the same defaults (src/engine/defaults.ts).
 */
import * as v from "valibot";
import { DEFAULTS } from "../engine/defaults";
import { FAILURES, MODES } from "../engine/types";
import { ConfigError, configErrorFrom } from "./errors";
import { MAX_LEASE_MS, ON_OFF } from "./fields";
import {
  claimValues,
  headerName,
  httpUrl,
  keyPrefix,
  MAX_TIMEOUT_MS,
  oneOf,
  stripPath,
  wholeMs,
} from "./settings";

/**
 * `jwt.jwksUrl`, checked as the Worker checks `RATE_LIMIT_JWKS_URL` (src/config/index.ts): a `URL` as its text,
 * and "" (an unset variable, as the Worker takes an empty binding) as no JWKS.
 */
const jwksUrl = v.pipe(
  v.union([v.string(), v.instance(URL)], "jwt.jwksUrl: expected a URL or a string"),
  v.transform(String),
  v.union([v.pipe(v.literal(""), v.transform(unset)), httpUrl("jwt.jwksUrl")]),
);

function unset(): undefined {
  return undefined;
}

/**
 * Every option `rateLimit()` takes, by name, and the one place each setting is checked and defaulted: a
 * `mode: "ON"` from untyped code is an error, never a limiter that silently only monitors. Their documented
 * type is `RateLimitOptions` (src/middleware/options.ts); src/middleware/index.ts checks at compile time that
 * both name the same options.
 */
const middlewareOptionsSchema = v.object({
  // Checked where they are used (src/middleware/index.ts: parseRules, redisOf, the limiter).
  rules: v.optional(v.unknown()),
  redis: v.optional(v.unknown()),
  decider: v.optional(v.unknown()),
  liveModes: v.optional(v.unknown()),
  onDecision: v.optional(v.unknown()),
  onSettle: v.optional(v.unknown()),
  onAction: v.optional(v.unknown()),
  mode: v.optional(oneOf("mode", MODES), DEFAULTS.mode),
  failure: v.optional(oneOf("failure", FAILURES), DEFAULTS.failure),
  timeoutMs: v.optional(wholeMs("timeoutMs", MAX_TIMEOUT_MS), DEFAULTS.timeoutMs),
  prefix: v.optional(keyPrefix("prefix"), DEFAULTS.prefix),
  // No default: on Cloudflare Workers `CF-Connecting-IP`, elsewhere none (src/middleware/conninfo.ts).
  clientIpHeader: v.optional(headerName("clientIpHeader")),
  getConnInfo: v.optional(
    v.function("getConnInfo: expected a function (Hono's getConnInfo of your runtime)"),
  ),
  leases: v.optional(oneOf("leases", ON_OFF), DEFAULTS.leases),
  leaseMs: v.optional(wholeMs("leaseMs", MAX_LEASE_MS), DEFAULTS.leaseMs),
  cluster: v.optional(v.boolean("cluster: expected true or false"), DEFAULTS.cluster),
  overrides: v.optional(v.boolean("overrides: expected true or false"), DEFAULTS.overrides),
  // `secret` is any string, as `RATE_LIMIT_JWT_SECRET` is; it is read from the options where it is used.
  jwt: v.optional(
    v.looseObject(
      {
        jwksUrl: v.optional(jwksUrl),
        audience: v.optional(claimValues("jwt.audience")),
        issuer: v.optional(claimValues("jwt.issuer")),
        verifier: v.optional(
          v.function('jwt.verifier: expected a function (joseVerifier from "hono-floodgate/jwt")'),
        ),
      },
      "jwt: expected an object ({ secret?, jwksUrl?, audience?, issuer?, verifier })",
    ),
  ),
});

/**
 * Every option `rateLimit()` takes: any other name is an error, as an unknown rule field is (a `timeout`
 * meant as `timeoutMs`, or a `clientIPHeader`, would otherwise be ignored without a word).
 */
export const MIDDLEWARE_OPTIONS = Object.keys(middlewareOptionsSchema.entries) as readonly MiddlewareOption[];

/** The name of one of `rateLimit()`'s options. */
export type MiddlewareOption = keyof typeof middlewareOptionsSchema.entries;

const KNOWN_OPTIONS: ReadonlySet<string> = new Set(MIDDLEWARE_OPTIONS);

/** The middleware's settings, validated, defaults applied (the options checked where they are used left out). */
export type MiddlewareSettings = Omit<
  v.InferOutput<typeof middlewareOptionsSchema>,
  "rules" | "redis" | "decider" | "liveModes" | "onDecision" | "onSettle" | "onAction"
>;

/**
 * Validates `rateLimit()`'s settings, rejects option names it does not know (the other options are
 * checked where they are used), and applies the defaults.
 * @throws {ConfigError} naming every option that is wrong
 */
export function parseMiddlewareSettings(options: object): MiddlewareSettings {
  const unknown = Object.keys(options).filter((name) => !KNOWN_OPTIONS.has(name));
  const result = v.safeParse(middlewareOptionsSchema, options);
  if (unknown.length === 0 && result.success) return result.output;
  const problems = unknown.map((name) => `${name}: unknown option${suggestion(name)}`);
  if (!result.success) problems.push(...configErrorFrom("", result.issues.map(stripPath)).problems);
  throw new ConfigError(problems);
}

/** A known option the unknown `name` was probably meant as: the same but for case, or its start. */
function suggestion(name: string): string {
  const lower = name.toLowerCase();
  const meant =
    lower.length < 3 ? undefined : MIDDLEWARE_OPTIONS.find((known) => known.toLowerCase().startsWith(lower));
  return meant === undefined ? "" : ` (did you mean ${meant}?)`;
}
