/**
 * `rateLimit(options)`: Floodgate as a Hono middleware. It validates its options once, builds one limiter
 * (src/middleware/limiter.ts, the same one the Worker runs) and returns the middleware. Options may be a
 * function of the context, for credentials that arrive with the first request (Workers' bindings): it is
 * called once, on the first request, and the limiter it builds serves every later request of the isolate.
 */
import type { Context, Env as HonoEnv, MiddlewareHandler } from "hono";
// From each module, not the index (src/config/index.ts): the Worker's binding schema there is no part of the package.
import { restTokenProblem, restUrlProblem } from "../config/endpoints";
import { ConfigError, collecting } from "../config/errors";
import {
  type MIDDLEWARE_OPTIONS,
  type MiddlewareSettings,
  parseMiddlewareSettings,
} from "../config/middleware";
import type { ActionRule } from "../config/rule-config";
import { parseRuleSet } from "../config/rules";
import { DEFAULTS } from "../engine/defaults";
import type { Decider } from "../engine/types";
import { createEngine } from "../resilience/engine";
import { connectionAddressOf, type GetConnInfo, onCloudflareWorkers } from "./conninfo";
import { createLimiter, type Limiter, type LimiterMiddleware } from "./limiter";
import type { RateLimitOptions, RuleOptions } from "./options";
import type { PlannedRule } from "./plan";
import { actionReport } from "./report";

export * from "./errors";
export { createLimiter, type Limiter, type LimiterDeps, type LimiterMiddleware } from "./limiter";
export type * from "./options";
export type { PlannedRule } from "./plan";
export type { SettledRule, SettleEvent } from "./settled";

/**
 * Rate-limits the requests of a Hono app with Floodgate's engine (one atomic Redis call per request, or none
 * for a hot identity holding a lease: docs/leases.md).
 * A denied request throws a 429 (`QuotaExceededError`, an `HTTPException`) whose default response is
 * problem+json with `Retry-After`; the decision is on `c.get("rateLimit")`. An invalid option throws a
 * `ConfigError` naming the field (at once for a value, on the first request for a function).
 *
 * @example
 * type Bindings = { UPSTASH_REDIS_REST_URL: string; UPSTASH_REDIS_REST_TOKEN: string };
 * // Naming the app's env lets TypeScript check the binding names (Hono cannot infer it here).
 * app.use("/api/*", rateLimit<{ Bindings: Bindings }>((c) => ({
 *   redis: { url: c.env.UPSTASH_REDIS_REST_URL, token: c.env.UPSTASH_REDIS_REST_TOKEN },
 *   rules: [{ name: "per-key", key: "header:x-api-key", algorithm: "token-bucket", limit: 100, period: "1m" }],
 * })));
 */
// `any` as Hono's own `Context` defaults it: `rateLimit((c) => …)` inside `app.use` cannot infer the app's
// env from the call site, and `c.env.UPSTASH_REDIS_REST_URL` must type-check without an annotation.
// biome-ignore lint/suspicious/noExplicitAny: see above
export function rateLimit<E extends HonoEnv = any>(
  options: RateLimitOptions<E> | ((c: Context<E>) => RateLimitOptions<E>),
): MiddlewareHandler<E> {
  // The limiter sets its own variables (`FloodgateVariables`) on whatever the app's env is: an app names them
  // in its `Variables` to read them typed.
  if (typeof options !== "function") {
    const { middleware } = limiterOf(options);
    return middleware as unknown as MiddlewareHandler<E>;
  }
  let limiter: Limiter | undefined;
  return async function rateLimit(c, next) {
    limiter ??= limiterOf(options(c));
    return limiter.middleware(c as unknown as Parameters<LimiterMiddleware>[0], next);
  };
}

/** Whether `A` and `B` are the same set of names. */
type SameNames<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
// The names the run-time check accepts (src/config/middleware.ts) are exactly the typed options: an option
// added to one and not the other fails to compile here.
true satisfies SameNames<keyof RateLimitOptions, (typeof MIDDLEWARE_OPTIONS)[number]>;

/** Validates the options and builds their limiter (settings checked and defaulted in src/config). */
function limiterOf<E extends HonoEnv>(options: RateLimitOptions<E>): Limiter {
  if (!options || typeof options !== "object") throw new ConfigError("options: expected an object");
  // Every part checked, so one failed `rateLimit()` names everything wrong at once.
  const problems: string[] = [];
  const rules = collecting(problems, () => validateRules(options));
  const settings = collecting(problems, () => parseMiddlewareSettings(options));
  const redis = options.decider ? undefined : collecting(problems, () => redisOf(options.redis));
  if ((options.jwt?.secret || settings?.jwt?.jwksUrl) && options.jwt?.verifier === undefined) {
    // The verifier is an import of its own: jose (~20 KB minified) is bundled only by apps that verify tokens.
    problems.push(
      'jwt.verifier: required with jwt.secret or jwt.jwksUrl: import { joseVerifier } from "hono-floodgate/jwt"',
    );
  }
  if (!rules || !settings || problems.length > 0) throw new ConfigError(problems);
  return createLimiter(rules.rules, {
    actions: rules.actions,
    // No `redis` only beside a ready decider: a problem with it was thrown above.
    decider:
      options.decider ??
      engineOf(redis as RedisCredentials, settings, {
        asyncRules: rules.rules.some(({ rule }) => rule.sync === "async"),
      }),
    mode: settings.mode,
    failure: settings.failure,
    timeoutMs: settings.timeoutMs,
    // Off Cloudflare no header is the client's address unless the app says so (src/middleware/conninfo.ts).
    clientIpHeader: settings.clientIpHeader ?? (onCloudflareWorkers() ? DEFAULTS.clientIpHeader : undefined),
    connectionAddress: connectionAddressOf(options.getConnInfo as GetConnInfo | undefined),
    verifyJwt: options.jwt?.verifier?.(
      {
        secret: options.jwt?.secret,
        jwksUrl: settings.jwt?.jwksUrl,
        audience: settings.jwt?.audience,
        issuer: settings.jwt?.issuer,
      },
      { timeoutMs: settings.timeoutMs },
    ),
    liveModes: options.liveModes as
      | ((c: Context) => ReturnType<NonNullable<typeof options.liveModes>>)
      | undefined,
    // The package has no admin API to set an override: none is read unless asked for.
    overrides: settings.overrides,
    onDecision: options.onDecision,
    onSettle: options.onSettle,
    onAction: actionReport(options.onAction),
  });
}

/**
 * Validates the rules once; key/cost/tier functions are set aside and the rest checked like RATE_LIMIT_RULES.
 * Action rules (docs/lists.md) come back apart, each knowing its place among the counting rules.
 */
function validateRules<E extends HonoEnv>(
  options: RateLimitOptions<E>,
): { rules: PlannedRule[]; actions: ActionRule[] } {
  if (!options || !Array.isArray(options.rules)) throw new ConfigError("rules: expected an array of rules");
  // An action rule has none of a counting rule's functions: read as a counting rule whose fields are absent.
  const written = options.rules as (Partial<RuleOptions<E>> | null | undefined)[];
  const fns = written.map((rule) => ({
    keyFn: typeof rule?.key === "function" ? rule.key : undefined,
    tierFn: typeof rule?.tier === "function" ? rule.tier : undefined,
    costFn: typeof rule?.cost === "function" ? rule.cost : undefined,
  }));
  const plain = written.map((rule, i) =>
    // Not an object (untyped code): as it is, for parseRules to name.
    typeof rule !== "object" || rule === null
      ? rule
      : // Only a function is replaced: a field set to `undefined` is a field an action rule may not have.
        {
          ...rule,
          ...(fns[i]?.keyFn && { key: "global" }),
          ...(fns[i]?.tierFn && { tier: "global" }),
          ...(fns[i]?.costFn && { cost: 1 }),
        },
  );
  const jwtVerifiable = Boolean(options.jwt?.secret || options.jwt?.jwksUrl);
  const { rules, actions } = parseRuleSet(plain, { label: "rules", jwtVerifiable });
  // Live lists are kept by the Worker's admin API (docs/lists.md); the package has none to read.
  const listed = plain.findIndex(
    (rule) => typeof (rule as { match?: { list?: unknown } } | null)?.match?.list === "string",
  );
  if (listed !== -1) {
    throw new ConfigError(
      `rules[${listed}].match.list: live lists are served by the Floodgate Worker's admin API; in the middleware, list addresses in match.ip`,
    );
  }
  const byName = new Map(options.rules.map((rule, i) => [rule?.name, fns[i]]));
  return {
    rules: rules.map((rule) => ({ rule, ...(byName.get(rule.name) as object) }) as PlannedRule),
    actions,
  };
}

type RedisCredentials = NonNullable<RateLimitOptions["redis"]>;

/** The Upstash credentials among the options, checked (when no ready `decider` is given). */
function redisOf(redis: RateLimitOptions["redis"]): RedisCredentials {
  if (!redis) {
    throw new ConfigError(
      "redis: give { url, token } (UPSTASH_REDIS_REST_URL / _TOKEN) or a ready `decider`",
    );
  }
  // Name the empty field: an unset environment variable arrives as `undefined` or "".
  const missing: string[] = [];
  if (!redis.url) missing.push("redis.url: required (the Upstash REST URL, UPSTASH_REDIS_REST_URL)");
  if (!redis.token) missing.push("redis.token: required (the Upstash REST token, UPSTASH_REDIS_REST_TOKEN)");
  if (missing.length > 0) throw new ConfigError(missing);
  const problems = [
    restUrlProblem("redis.url", String(redis.url)),
    restTokenProblem("redis.token (UPSTASH_REDIS_REST_TOKEN)", String(redis.token)),
  ].filter((problem) => problem !== undefined);
  if (problems.length > 0) throw new ConfigError(problems);
  return redis;
}

/** The engine on checked Upstash credentials. */
function engineOf(
  redis: RedisCredentials,
  settings: MiddlewareSettings,
  { asyncRules }: { asyncRules: boolean },
): Decider {
  const { prefix, timeoutMs, cluster, leases, leaseMs } = settings;
  // Built on the first decision: a Worker may call `rateLimit({...})` at module scope, where no I/O,
  // timer or randomness is allowed.
  let decider: Decider | undefined;
  const get = () => {
    if (decider) return decider;
    // One endpoint; with `cluster`, one script call per slot group instead of one per request
    // (docs/scaling-out.md).
    decider = createEngine({
      endpoints: [redis],
      prefix,
      timeoutMs,
      cluster,
      leases,
      leaseMs,
      asyncRules,
    }).decider;
    return decider;
  };
  return {
    decide: (calls, requestId, opts) => get().decide(calls, requestId, opts),
    decideNow: (calls, requestId, waitUntil) => get().decideNow?.(calls, requestId, waitUntil),
    release: (call, requestId, reservation) => get().release(call, requestId, reservation),
    refund: (calls, requestId, whenUs) =>
      get().refund?.(calls, requestId, whenUs) ?? Promise.resolve(calls.map(() => 0)),
    settle: (settlements, requestId, decidedAtMs) =>
      get().settle?.(settlements, requestId, decidedAtMs) ?? Promise.reject(new Error("no settle")),
  };
}
