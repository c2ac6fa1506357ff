/**
 * The admin API's gate: off (404) without `RATE_LIMIT_ADMIN_TOKEN`, otherwise `Authorization: Bearer <token>`
 * compared in constant time, or the dashboard's session cookie (src/admin/csrf.ts: a change made with
 * the cookie must come from the dashboard's own origin and carry its CSRF token). It runs before routing
 * to a handler, so with a token set an unknown admin path is 401 before it is 404 (nothing about which
 * paths exist leaks to a caller without the token).
 */
import { timingSafeEqual } from "hono/utils/buffer";
import { checkStateChange, sessionOf } from "./csrf";
import { AdminError, notFound } from "./problem";

const BEARER = /^Bearer[ \t]+(\S+)[ \t]*$/i;

/**
 * Whether a request sent to the proxy carries the admin token as its bearer token: such a request is never
 * forwarded (src/worker.ts), whatever its path, so the token never reaches the origin by a spelling of the
 * admin prefix no check foresaw (`/__floodgate;a/…`, double escapes). Synchronous, as it runs on every
 * proxied request with an `Authorization` header: a length check first (most bearer tokens differ in length),
 * then every character compared, matching or not, so the time tells nothing of a prefix.
 */
export function carriesAdminToken(authorization: string | null, adminToken: string): boolean {
  if (authorization === null || authorization.length < adminToken.length + 7) return false;
  const presented = BEARER.exec(authorization)?.[1];
  if (presented === undefined || presented.length !== adminToken.length) return false;
  let difference = 0;
  for (let i = 0; i < presented.length; i++) difference |= presented.charCodeAt(i) ^ adminToken.charCodeAt(i);
  return difference === 0;
}

/**
 * Checks one request against the admin token; throws the `AdminError` to answer with (404 when the API is
 * off, 401 when the token or session is missing or wrong, 403 for a cross-site change made with the cookie).
 */
export async function authorize(request: Request, adminToken: string | undefined): Promise<void> {
  if (!adminToken)
    throw notFound("The admin API is off: set the RATE_LIMIT_ADMIN_TOKEN secret to enable it.");
  const authorization = request.headers.get("Authorization");
  if (!authorization) {
    const session = await sessionOf(request, adminToken);
    if (session) return checkStateChange(request, adminToken, session);
  }
  const presented = authorization ? BEARER.exec(authorization)?.[1] : undefined;
  if (!presented) {
    throw new AdminError(401, "Unauthorized", "Send the admin token as `Authorization: Bearer <token>`.");
  }
  // Both sides are hashed before comparing, so neither the length nor a prefix of the token leaks by timing.
  if (!(await timingSafeEqual(presented, adminToken))) {
    throw new AdminError(401, "Unauthorized", "The admin token is wrong.");
  }
}
