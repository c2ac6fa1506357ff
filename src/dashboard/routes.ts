/**
 * The dashboard's routes on the admin app (only when `RATE_LIMIT_ADMIN_TOKEN` is set; 404 otherwise):
 *
 *   GET  /__floodgate/                the dashboard, or the sign-in form without a valid session
 *   POST /__floodgate/login           form field `token` → 303 to the dashboard with the session cookie
 *   POST /__floodgate/logout          clears the cookie → 303 to the sign-in form
 *   GET  /__floodgate/dashboard.js    the page's script; dashboard.css, favicon.svg (no secrets in any)
 *   GET  /__floodgate/dashboard.json  the numbers the script refreshes (behind the admin gate)
 *   POST /__floodgate/lookup/:rule    Look up: a value's state by its hash, read-only (lookup.ts)
 *   GET  /__floodgate/audit           the audit trail of admin changes (audit.ts, which also records them)
 *   PUT  /__floodgate/labels/:rule/:identity   an operator's label for a hashed identity (labels.ts); DELETE
 *   GET  /__floodgate/whatif/:rule?limit=N      identities' peak demand in the last hour, and N's effect (whatif.ts)
 *
 * Every response here carries the dashboard's CSP (csp.ts).
 */
import type { Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { timingSafeEqual } from "hono/utils/buffer";
import type { AdminUi } from "../admin/app";
import type { AdminContext, AdminContextResolver, AdminEnv } from "../admin/context";
import { crossSite, sessionEpochOf, sessionOf } from "../admin/csrf";
import { ADMIN_PREFIX } from "../admin/prefix";
import { AdminError, notFound } from "../admin/problem";
import { createSession, csrfToken, sessionCookieHeader } from "../admin/session";
import { AdminThrottle } from "../admin/throttle";
import { bumpSessionEpoch, readLiveModes } from "../live/modes";
import { auditRoutes } from "./audit";
import { DASHBOARD_SCRIPT } from "./client";
import { DASHBOARD_HEADERS } from "./csp";
import { readDashboard } from "./data";
import { labelRoutes } from "./labels";
import { lookupRoutes } from "./lookup";
import { whatIfRoutes } from "./whatif";
import { renderDashboard, renderSignIn } from "./render";
import { DASHBOARD_STYLE } from "./style";

/** The largest sign-in body read, bytes: a form with a token of any sensible length fits many times over. */
const MAX_SIGN_IN_BYTES = 4096;

const FAVICON =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#2b6cb0"/><path d="M3 11h10M3 7h6" stroke="#fff" stroke-width="2"/></svg>';

/** Adds the dashboard's security headers to every response of the admin app (API responses too: harmless). */
export function dashboardHeaders(app: Hono<AdminEnv>): void {
  app.use("*", async function dashboardHeaders(c, next) {
    await next();
    try {
      for (const [name, value] of Object.entries(DASHBOARD_HEADERS)) c.res.headers.set(name, value);
    } catch {
      // A response with immutable headers is not one of the dashboard's own.
    }
  });
}

/** The routes served before the admin gate: the page itself, sign-in, sign-out, the script and the stylesheet. */
export function dashboardPublicRoutes(
  app: Hono<AdminEnv>,
  resolve: AdminContextResolver,
  throttle: AdminThrottle,
): void {
  const adminToken = async (c: Context): Promise<string> => {
    const token = (await resolve(c)).config.adminToken;
    if (!token) throw notFound("The dashboard is off: set the RATE_LIMIT_ADMIN_TOKEN secret to enable it.");
    return token;
  };
  const secure = (c: Context) => new URL(c.req.url).protocol === "https:";

  // `/__floodgate/` (and `/__floodgate`): a sub-app's "/" route matches only the path without the slash.
  app.get("*", async (c, next) => {
    const path = new URL(c.req.url).pathname;
    if (path !== ADMIN_PREFIX && path !== `${ADMIN_PREFIX}/`) return next();
    const admin = await resolve(c);
    const token = await adminToken(c);
    // A forged or expired cookie gets the sign-in form, like no cookie at all.
    const session = await sessionOf(c.req.raw, token, () => sessionEpochOf(admin)).catch((error) => {
      if (error instanceof AdminError) return undefined;
      throw error;
    });
    if (!session) return c.html(renderSignIn(false));
    const [data, csrf] = await Promise.all([
      readDashboard(admin, (p) => c.executionCtx.waitUntil(p)),
      csrfToken(token, session),
    ]);
    return c.html(renderDashboard(data, csrf));
  });

  // Sign-ins are never rate-limited (wrong ones are throttled per client: src/admin/throttle.ts): a body is
  // read only up to a size no token form comes near, so an unauthenticated client cannot make the isolate
  // buffer megabytes.
  const signInBody = bodyLimit({
    maxSize: MAX_SIGN_IN_BYTES,
    onError: () => {
      throw new AdminError(413, "Content Too Large", `A sign-in form is at most ${MAX_SIGN_IN_BYTES} bytes.`);
    },
  });
  app.post("/login", signInBody, async (c) => {
    const token = await adminToken(c);
    if (crossSite(c.req.raw))
      throw new AdminError(403, "Forbidden", "Sign in from the dashboard's own page.");
    const client = AdminThrottle.clientOf(c.req.raw, (await resolve(c)).config.clientIpHeader);
    throttle.check(client);
    const form = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
    const presented = typeof form.token === "string" ? form.token : "";
    // Hashes both sides before comparing: constant time whatever the lengths.
    if (!presented || !(await timingSafeEqual(presented, token))) {
      throttle.failed(client);
      return c.html(renderSignIn(true), 401);
    }
    const session = await createSession(token, Date.now(), await sessionEpochOf(await resolve(c)));
    c.header("Set-Cookie", sessionCookieHeader(session, secure(c), ADMIN_PREFIX));
    return c.redirect(`${ADMIN_PREFIX}/`, 303);
  });

  app.post("/logout", async (c) => {
    const token = await adminToken(c);
    if (crossSite(c.req.raw))
      throw new AdminError(403, "Forbidden", "Sign out from the dashboard's own page.");
    const admin = await resolve(c);
    // Only a live session ends every session (docs/security.md): anyone else just gets a cleared cookie, so no
    // stranger can keep signing operators out.
    const session = await sessionOf(c.req.raw, token, () => sessionEpochOf(admin)).catch(() => undefined);
    if (session) await endEverySession(admin);
    c.header("Set-Cookie", sessionCookieHeader(undefined, secure(c), ADMIN_PREFIX));
    return c.redirect(`${ADMIN_PREFIX}/`, 303);
  });

  app.get("/dashboard.js", async (c) => {
    await adminToken(c);
    return c.body(DASHBOARD_SCRIPT, 200, { "Content-Type": "text/javascript; charset=utf-8" });
  });

  // Its own icon, so a browser's `/favicon.ico` guess never reaches the limiter or the origin.
  app.get("/favicon.svg", async (c) => {
    await adminToken(c);
    return c.body(FAVICON, 200, { "Content-Type": "image/svg+xml" });
  });

  app.get("/dashboard.css", async (c) => {
    await adminToken(c);
    return c.body(DASHBOARD_STYLE, 200, { "Content-Type": "text/css; charset=utf-8" });
  });
}

/**
 * Moves the sign-out count on, so every cookie issued so far stops verifying: here at once, in every other
 * isolate with its next read of the live modes (about a second). A Redis that does not answer is a 503: the
 * browser keeps its cookie, and its owner knows the sign-out did not take.
 */
async function endEverySession(admin: AdminContext): Promise<void> {
  const names = admin.config.rules.map((rule) => rule.name);
  try {
    await bumpSessionEpoch(admin.redis, admin.config.prefix);
    admin.liveModes?.replace(await readLiveModes(admin.redis, admin.config.prefix, names));
  } catch (error) {
    console.error(
      JSON.stringify({ event: "sign_out_failed", error: error instanceof Error ? error.name : "error" }),
    );
    throw new AdminError(
      503,
      "Service Unavailable",
      "The sign-out could not be recorded (Redis did not answer), so this session would stay valid: try again.",
    );
  }
}

/** The routes behind the admin gate (Bearer token or session cookie); the audit's recorder sees every change. */
export function dashboardRoutes(app: Hono<AdminEnv>): void {
  auditRoutes(app);
  lookupRoutes(app);
  labelRoutes(app);
  whatIfRoutes(app);
  app.get("/dashboard.json", async (c) =>
    c.json(await readDashboard(c.get("admin"), (p) => c.executionCtx.waitUntil(p))),
  );
}

/** The dashboard as the admin app mounts it (src/worker.ts hands it to `createAdminApp`). */
export const dashboard: AdminUi = {
  headers: dashboardHeaders,
  publicRoutes: dashboardPublicRoutes,
  routes: dashboardRoutes,
};
