/**
 * The admin API's gate: off (404) without `RATE_LIMIT_ADMIN_TOKEN`, otherwise `Authorization: Bearer <token>`
 * compared in constant time, or the dashboard's session cookie (src/admin/csrf.ts: a change made with
 * the cookie must come from the dashboard's own origin and carry its CSRF token). It runs before routing
 * to a handler, so with a token set an unknown admin path is 401 before it is 404 (nothing about which
 * paths exist leaks to a caller without the token).
 */
import { timingSafeEqual } from "hono/utils/buffer";
import { checkStateChange, sessionOf } from "./csrf";
import { AdminError, notFound, WrongCredentialsError } from "./problem";

const BEARER = /^Bearer[ \t]+(\S+)[ \t]*$/i;

/**
 * Whether a request sent to the proxy carries the admin token anywhere in its `Authorization` header: in any
 * scheme (`Bearer`, `Token`, …), quoted, in a list, or inside `Basic` credentials. Such a request is never
 * forwarded (src/worker.ts), whatever its path, so the token never reaches the origin by a spelling of the
 * admin prefix or of the header that no check foresaw (docs/security.md). It runs on every proxied request
 * with an `Authorization` header at least as long as the token, in one pass whose time does not depend on
 * how much of the token a header matches (see `containsAt`).
 */
export function carriesAdminToken(authorization: string | null, adminToken: string): boolean {
  if (authorization === null || adminToken === "" || authorization.length < adminToken.length) return false;
  if (contains(authorization, adminToken)) return true;
  // `Basic base64(user:password)`, wherever it stands in a list: the token may be either half.
  if (!/basic/i.test(authorization)) return false;
  for (const item of authorization.split(/[\s,]+/)) {
    if (item.length < adminToken.length || !/^[A-Za-z0-9+/]+=*$/.test(item)) continue;
    let decoded: string;
    try {
      decoded = atob(item);
    } catch {
      continue;
    }
    if (contains(decoded, adminToken)) return true;
  }
  return false;
}

/** The rolling hash's base; arithmetic wraps at 32 bits (`Math.imul`), exact and allocation-free. */
const HASH_BASE = 0x01000193;

/**
 * Whether `needle` occurs in `text`: a rolling hash of every window of the needle's length, each compared in
 * full only when its hash matches (a match, or a rare collision a client cannot aim at without the token). A
 * naive search stops at the first differing character of each window, which would let response times tell
 * how much of a guess is right.
 */
function contains(text: string, needle: string): boolean {
  const length = needle.length;
  if (text.length < length) return false;
  let target = 0;
  let hash = 0;
  let lead = 1; // HASH_BASE ** (length - 1), for taking the first character of a window out
  for (let i = 0; i < length; i++) {
    target = (Math.imul(target, HASH_BASE) + needle.charCodeAt(i)) | 0;
    hash = (Math.imul(hash, HASH_BASE) + text.charCodeAt(i)) | 0;
    if (i > 0) lead = Math.imul(lead, HASH_BASE);
  }
  let found = false;
  for (let start = 0; ; start++) {
    if (hash === target && containsAt(text, start, needle)) found = true;
    const next = start + length;
    if (next >= text.length) return found;
    hash = (Math.imul(hash - Math.imul(text.charCodeAt(start), lead), HASH_BASE) + text.charCodeAt(next)) | 0;
  }
}

/** Whether `needle` stands in `text` at `start`, every character compared whatever the first difference. */
function containsAt(text: string, start: number, needle: string): boolean {
  let difference = 0;
  for (let i = 0; i < needle.length; i++) difference |= text.charCodeAt(start + i) ^ needle.charCodeAt(i);
  return difference === 0;
}

/**
 * Checks one request against the admin token (`sessionEpoch`: the dashboard's current sign-out count, asked
 * only for a request with a session cookie); throws the `AdminError` to answer with (404 when the API is
 * off, 401 when the token or session is missing or wrong, 403 for a cross-site change made with the cookie).
 */
export async function authorize(
  request: Request,
  adminToken: string | undefined,
  sessionEpoch: () => Promise<number>,
): Promise<void> {
  if (!adminToken)
    throw notFound("The admin API is off: set the RATE_LIMIT_ADMIN_TOKEN secret to enable it.");
  const authorization = request.headers.get("Authorization");
  if (!authorization) {
    const session = await sessionOf(request, adminToken, sessionEpoch);
    if (session) return checkStateChange(request, adminToken, session);
  }
  const presented = authorization ? BEARER.exec(authorization)?.[1] : undefined;
  if (!presented) {
    throw new AdminError(401, "Unauthorized", "Send the admin token as `Authorization: Bearer <token>`.");
  }
  // Both sides are hashed before comparing, so neither the length nor a prefix of the token leaks by timing.
  if (!(await timingSafeEqual(presented, adminToken))) {
    throw new WrongCredentialsError("The admin token is wrong.");
  }
}

/**
 * Checks a scrape of `/__floodgate/metrics`: `RATE_LIMIT_METRICS_TOKEN` as the bearer token (it opens this
 * route and nothing else), or whatever `authorize` accepts. 404 when neither token is set.
 */
export async function authorizeMetrics(
  request: Request,
  adminToken: string | undefined,
  metricsToken: string | undefined,
  sessionEpoch: () => Promise<number>,
): Promise<void> {
  if (metricsToken) {
    const authorization = request.headers.get("Authorization");
    const presented = authorization ? BEARER.exec(authorization)?.[1] : undefined;
    if (presented !== undefined && (await timingSafeEqual(presented, metricsToken))) return;
    if (!adminToken) throw new WrongCredentialsError("The metrics token is missing or wrong.");
  }
  if (!adminToken)
    throw notFound(
      "Metrics are off: set RATE_LIMIT_METRICS_TOKEN (or RATE_LIMIT_ADMIN_TOKEN) to enable them.",
    );
  await authorize(request, adminToken, sessionEpoch);
}
