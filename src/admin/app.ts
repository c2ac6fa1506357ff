/**
 * The admin API (docs/operating.md) as its own Hono app, mounted by the Worker at `ADMIN_PREFIX`:
 *
 *   app.route(ADMIN_PREFIX, createAdminApp((c) => adminContextFor(c)));
 *
 * `/health` is always served; `/metrics` whenever `RATE_LIMIT_ADMIN_TOKEN` or `RATE_LIMIT_METRICS_TOKEN` is set
 * (docs/monitoring.md); everything else needs `RATE_LIMIT_ADMIN_TOKEN` (404 without it), and all but
 * the user interface's public routes (the dashboard's page, sign-in and assets: src/dashboard/routes.ts, which
 * the Worker hands in as `ui`; the admin API never imports it) need `Authorization: Bearer <token>` or
 * the dashboard's session cookie (401 otherwise, checked before routing, so an unknown admin path is 401
 * before it is 404). Requests here are never rate-limited and never proxied.
 */
import { Hono } from "hono";
import { ConfigError } from "../config/errors";
import { sessionEpochOf } from "./csrf";
import { onError } from "../http/problems";
import { UnparseableUrlError } from "../identity";
import { ProblemError } from "../util/problem";
import { authorize } from "./auth";
import type { AdminContextResolver, AdminEnv } from "./context";
import { healthOfEndpoints } from "./health";
import { metricsRoutes } from "./metrics";
import { AdminError, notFound, WrongCredentialsError } from "./problem";
import { blockRoutes } from "./routes-blocks";
import { keyRoutes } from "./routes-keys";
import { listRoutes } from "./routes-lists";
import { liveRoutes } from "./routes-live";
import { overrideRoutes } from "./routes-overrides";
import { AdminThrottle } from "./throttle";

export { carriesAdminToken } from "./auth";
export type { AdminEnv } from "./context";
export { ADMIN_PREFIX, underAdminPrefix } from "./prefix";

/** A user interface served by the admin app (the dashboard): its middleware and routes, each where it goes. */
export interface AdminUi {
  /** Middleware for every response of the admin app (security headers). */
  headers(app: Hono<AdminEnv>): void;
  /**
   * Routes served before the admin gate (a page that signs in); `throttle` counts its wrong sign-ins with the
   * gate's wrong tokens (throttle.ts).
   */
  publicRoutes(app: Hono<AdminEnv>, resolve: AdminContextResolver, throttle: AdminThrottle): void;
  /** Routes behind the admin gate. */
  routes(app: Hono<AdminEnv>): void;
}

/**
 * Builds the admin app; `resolve` gives it the Worker's config, Redis client, store and decider; `ui`, the
 * dashboard (absent: the API alone).
 */
export function createAdminApp(resolve: AdminContextResolver, ui?: AdminUi): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();
  // Every route below reads the URL: one the runtime passed on unparseable (a `Host` with a space) is the
  // client's 400 before anything else, not a 503 from deep inside.
  app.use("*", async (c, next) => {
    if (!URL.canParse(c.req.url)) throw new UnparseableUrlError();
    await next();
  });
  ui?.headers(app);

  app.get("/health", async (c) => {
    const admin = await resolve(c);
    // Never longer than a proxied request waits for Redis (docs/operating.md, "Health").
    const report = await healthOfEndpoints(admin.endpoints, admin.scriptSha, admin.endpointHealth(), {
      waitUntil: (probe) => c.executionCtx.waitUntil(probe),
      waitMs: admin.config.timeoutMs,
      jwks: admin.jwks?.(),
    });
    return c.json(report, 200, { "Cache-Control": "no-store" });
  });

  // Wrong tokens, sign-ins and session cookies, counted per client in this isolate (throttle.ts).
  const throttle = new AdminThrottle();

  // Authorized on its own: by the admin token, or by `RATE_LIMIT_METRICS_TOKEN`, which opens nothing else.
  metricsRoutes(app, resolve, throttle);

  // The dashboard's page, sign-in and assets answer without a session (the page shows the sign-in form).
  ui?.publicRoutes(app, resolve, throttle);

  app.use("*", async function adminGate(c, next) {
    const admin = await resolve(c);
    const client = AdminThrottle.clientOf(c.req.raw, admin.config.clientIpHeader);
    throttle.check(client);
    try {
      await authorize(c.req.raw, admin.config.adminToken, () => sessionEpochOf(admin));
    } catch (error) {
      if (error instanceof WrongCredentialsError) throttle.failed(client);
      throw error;
    }
    c.set("admin", admin);
    await next();
    c.header("Cache-Control", "no-store");
  });

  ui?.routes(app);
  liveRoutes(app);
  listRoutes(app);
  keyRoutes(app);
  blockRoutes(app);
  overrideRoutes(app);

  // Registered last and for every method: an admin path nobody handles must not fall through to the proxy.
  app.all("*", (c) => {
    throw notFound(`No admin endpoint ${c.req.method} ${new URL(c.req.url).pathname}.`);
  });

  app.onError((error, c) => {
    // A named outcome, or a configuration that cannot run (its 500 names the binding): the one funnel.
    if (error instanceof ProblemError || error instanceof ConfigError) return onError(error, c);
    // Anything else is a bug or Redis failing. Its message may quote a command (hashed identities only,
    // never a token), so it goes to the log and not on the wire.
    const { name, message } = error as Error;
    console.error(
      JSON.stringify({ event: "admin_error", error: name, message: String(message).slice(0, 300) }),
    );
    return onError(
      new AdminError(
        503,
        "Service Unavailable",
        "The admin request could not be completed; see the Worker's logs.",
      ),
      c,
    );
  });

  return app;
}
