/**
 * The Floodgate Worker: the admin API at `/__floodgate`, then the `rateLimit` middleware, then the proxy
 * to `ORIGIN_URL`. Everything is built once per isolate from the bindings, on the first request (Workers
 * forbid I/O, timers and randomness at module scope). An invalid configuration answers every request
 * with a 500 naming the binding and field; it never proxies unlimited.
 */
import { type ExecutionContext, Hono } from "hono";
import { ADMIN_PREFIX, carriesAdminToken, createAdminApp, underAdminPrefix } from "./admin/app";
import { dashboard } from "./dashboard/routes";
import { adminContextOf } from "./admin/context";
import { ConfigError, type FloodgateConfig, headersRead, parseEnv, regionChooser } from "./config";
import type { Env } from "./env";
import { MisconfiguredError, onError, ProblemError, problemResponse } from "./http/problems";
import { createProxy } from "./http/proxy";
import { createJwtVerifier } from "./identity/jose";
import { maskIdentity } from "./identity/show";
import { createLiveModes, LiveLists } from "./live";
import { createLimiter, type FloodgateVariables } from "./middleware";
import {
  createDecisionObserver,
  createSettleObserver,
  MetricsAggregator,
  TotalCounts,
} from "./observability";
import { regionalStage } from "./regions/decider";
import { createEngine } from "./resilience/engine";

type AppEnv = { Bindings: Env; Variables: FloodgateVariables };

/** Builds the isolate's app from validated bindings: one engine (a store per endpoint), one limiter, shared by all. */
function buildApp(config: FloodgateConfig, env: Env): Hono<AppEnv> {
  const engine = createEngine({
    endpoints: config.redisEndpoints,
    prefix: config.prefix,
    timeoutMs: config.timeoutMs,
    cluster: config.cluster,
    leases: config.leases,
    leaseMs: config.leaseMs,
    regional: regionalStage(config.regions.regions),
    asyncRules: config.rules.some((rule) => rule.sync === "async"),
  });
  const { stores, decider } = engine;
  // Keys shared by every identity (live modes, change log, override index, dashboard counts) live on the
  // first endpoint (docs/scaling-out.md).
  const store = stores[0] as (typeof stores)[0];
  // The live lists the rules read (docs/lists.md): their versions come with the live modes' read.
  const listNames = [
    ...new Set([...config.rules, ...config.actions].flatMap((rule) => rule.match.list ?? [])),
  ];
  const lists = listNames.length > 0 ? new LiveLists(store.redis, config.prefix, listNames) : undefined;
  const liveModes = createLiveModes(store.redis, config.prefix, {
    ruleNames: [...config.rules, ...config.actions].map((rule) => rule.name),
    listNames,
    forget: (rule, identityHash) => decider.forget(rule, identityHash),
    forgetBlocks: () => decider.forgetBlocks(),
    coldLoadTimeoutMs: config.timeoutMs,
  });
  // Counted only for the dashboard (the admin token) and `/__floodgate/metrics` (either token): without
  // them, no Redis command is spent on counting.
  const metrics =
    config.adminToken || config.metricsToken
      ? new MetricsAggregator(store.redis, config.prefix, {
          minutes: Boolean(config.adminToken),
          totals: new TotalCounts(config.prefix, {
            counters: () => decider.health(),
            ...(decider.leasedUnits && { leasedUnits: () => decider.leasedUnits?.() ?? 0 }),
          }),
        })
      : undefined;
  const verifyJwt = createJwtVerifier(
    {
      secret: config.jwtSecret,
      jwksUrl: config.jwksUrl,
      audience: config.jwtAudience,
      issuer: config.jwtIssuer,
    },
    { timeoutMs: config.timeoutMs },
  );
  const admin = adminContextOf({
    config,
    stores,
    shardOf: engine.shardOf,
    decider,
    liveModes,
    lists,
    metrics,
    // Health reports the JWKS as the limiter's verifier last knew it (docs/operating.md, "Health").
    jwks: verifyJwt?.jwks,
  });

  const app = new Hono<AppEnv>();
  app.onError(onError);
  // The dashboard's counts leave the isolate at most every few seconds, after a response, never on its path.
  // Without the dashboard, no such step: each middleware is one more async hop per request.
  if (metrics) {
    app.use("*", async (c, next) => {
      await next();
      metrics.flushIfDue((promise) => c.executionCtx.waitUntil(promise));
    });
  }
  // First, so that admin requests are never rate-limited; the admin app answers every path under its
  // prefix itself (unknown ones with 401/404), so none falls through to the proxy.
  app.route(
    ADMIN_PREFIX,
    createAdminApp(() => admin, dashboard),
  );

  // The region deciding a request: RATE_LIMIT_REGION, or its colo or continent (docs/regions.md).
  const regionOf = regionChooser(config.regions);
  const limiter = createLimiter(
    config.rules.map((rule) => ({ rule })),
    {
      decider,
      // Only where a dashboard shows them (the admin token set) and its operator opted in.
      identityHint: config.dashboardHints && config.adminToken !== undefined ? maskIdentity : undefined,
      mode: config.mode,
      failure: config.failure,
      timeoutMs: config.timeoutMs,
      clientIpHeader: config.clientIpHeader,
      // Never consulted here: the Worker's live modes carry the override index, which says who has one.
      overrides: true,
      verifyJwt,
      liveModes: (_c, waitUntil) => liveModes.current(waitUntil),
      // Its first read (live modes and override index) is never waited for: src/middleware/first-read.ts.
      decideWhileModesLoad: true,
      onDecision: createDecisionObserver({ analytics: env.RATE_LIMIT_ANALYTICS, metrics }),
      onAction: metrics && ((rule, verdict) => metrics.recordAction(rule, verdict)),
      onSettle: createSettleObserver({ analytics: env.RATE_LIMIT_ANALYTICS, metrics }),
      // What `onError` would answer, without the throw.
      answer: problemResponse,
      actions: config.actions,
      lists,
      regionOf: regionOf && ((request) => regionOf((request as { cf?: object }).cf)),
    },
  );
  app.use("*", limiter.middleware);

  const proxy = createProxy({
    originUrl: config.originUrl,
    timeoutMs: config.originTimeoutMs,
    counted: headersRead(config.rules),
  });
  const { adminToken } = config;
  app.all("*", (c) => {
    // The URL, path and client IP the limiter already read for this request (it runs before every route here).
    const request = c.get("floodgateRequest");
    if (underAdminPrefix(request.path, request.url.pathname)) {
      // The admin prefix spelled otherwise than the admin app answers it: never sent to the origin.
      throw new ProblemError(
        404,
        "about:blank",
        "Not Found",
        `No such admin endpoint: the admin API answers paths spelled exactly ${ADMIN_PREFIX}/… (no escapes, doubled slashes, dot segments or capitals).`,
      );
    }
    if (adminToken !== undefined && carriesAdminToken(c.req.header("Authorization") ?? null, adminToken)) {
      // An operator's request meant for the admin API, by a path that does not reach it: never forwarded.
      throw new ProblemError(
        400,
        "about:blank",
        "Bad Request",
        `This request carries the admin token, which is never sent to the origin: the admin API answers paths spelled exactly ${ADMIN_PREFIX}/….`,
      );
    }
    return proxy(c.req.raw, request.url, request.trustedIp(), c.get("floodgateTimer"));
  });
  return app;
}

// One app per bindings object: in production that is one per isolate; tests may pass several envs.
const apps = new WeakMap<object, Hono<AppEnv> | ConfigError>();

function appFor(env: Env): Hono<AppEnv> | ConfigError {
  let app = apps.get(env);
  if (app === undefined) {
    try {
      app = buildApp(parseEnv(env), env);
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      console.error(JSON.stringify({ event: "invalid_configuration", detail: error.message }));
      app = error;
    }
    apps.set(env, app);
  }
  return app;
}

export default {
  fetch(request: Request, env: Env, ctx: ExecutionContext): Response | Promise<Response> {
    const app = appFor(env);
    if (app instanceof ConfigError) return problemResponse(new MisconfiguredError(app));
    return app.fetch(request, env, ctx);
  },
};
