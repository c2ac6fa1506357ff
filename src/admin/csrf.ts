/**
 * Cookie sign-in for the admin API: a request without `Authorization` may present the dashboard's session
 * cookie. Cookies ride along with cross-site requests, so a state-changing one (anything but GET, HEAD,
 * OPTIONS) must also prove it comes from the dashboard itself: its `Origin` (or, without one, its
 * `Sec-Fetch-Site`) is this origin, and it carries the session's CSRF token in `X-Floodgate-CSRF`.
 */
import type { AdminContext } from "./context";
import { AdminError, WrongCredentialsError } from "./problem";
import { type Session, sessionCookieOf, validCsrf, verifySession } from "./session";

/** The header the page sends its CSRF token in. */
export const CSRF_HEADER = "X-Floodgate-CSRF";

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * The request's verified session; `undefined` when it carries no session cookie; throws 401 when the
 * cookie is forged, expired or signed out of. `sessionEpoch` (the current sign-out count) is asked only when
 * there is a cookie to check.
 */
export async function sessionOf(
  request: Request,
  adminToken: string,
  sessionEpoch: () => Promise<number>,
): Promise<Session | undefined> {
  const value = sessionCookieOf(request.headers.get("Cookie"));
  if (value === undefined) return undefined;
  const session = await verifySession(adminToken, value, Date.now(), await sessionEpoch());
  if (!session) {
    throw new WrongCredentialsError(
      "The dashboard session is invalid, expired or signed out of: sign in again.",
    );
  }
  return session;
}

/**
 * The current sign-out count, as this isolate's live copy has it, read again first when older than a second
 * (an idle isolate's copy may be minutes old); the last count read while Redis does not answer, 0 before any.
 */
export async function sessionEpochOf(admin: AdminContext): Promise<number> {
  return (await admin.liveModes?.fresh())?.sessionEpoch ?? 0;
}

/**
 * Whether the request says it was made by a page of this same origin: its `Origin`, or, when a browser
 * withholds that (absent, or `null` under some referrer policies), its `Sec-Fetch-Site`.
 */
function sameOrigin(request: Request): boolean {
  const origin = request.headers.get("Origin");
  if (origin !== null && origin !== "null") return origin === new URL(request.url).origin;
  return request.headers.get("Sec-Fetch-Site") === "same-origin";
}

/**
 * Whether a browser says the request comes from another site. Sign-in and sign-out refuse those (login CSRF);
 * a client that is not a browser (curl, a script) sends neither header and may sign in.
 */
export function crossSite(request: Request): boolean {
  const origin = request.headers.get("Origin");
  const site = request.headers.get("Sec-Fetch-Site");
  if (origin !== null && origin !== "null") return origin !== new URL(request.url).origin;
  if (site !== null) return site !== "same-origin" && site !== "none";
  return origin === "null";
}

/** Refuses (403) a state-changing request made with the cookie from another origin or without the CSRF token. */
export async function checkStateChange(
  request: Request,
  adminToken: string,
  session: Session,
): Promise<void> {
  if (SAFE_METHODS.has(request.method)) return;
  if (!sameOrigin(request)) {
    throw new AdminError(
      403,
      "Forbidden",
      "A change made with the dashboard's session must come from the dashboard.",
    );
  }
  if (!(await validCsrf(adminToken, session, request.headers.get(CSRF_HEADER)))) {
    throw new AdminError(
      403,
      "Forbidden",
      `A change made with the dashboard's session needs its ${CSRF_HEADER} header.`,
    );
  }
}
