/**
 * The dashboard's sign-in session: a stateless cookie `<expires>.<nonce>.<signature>` signed with HMAC-SHA-256
 * under a key derived from `RATE_LIMIT_ADMIN_TOKEN` and the sign-out count (`LiveModes.sessionEpoch`), so
 * rotating the token ends every session at once, and so does signing out: every isolate reads the new count
 * within about a second, and a cookie signed under the old one no longer verifies (docs/security.md). The
 * cookie is `HttpOnly; SameSite=Strict; Path=/__floodgate` (+ `Secure` over https) and lasts 12 hours. A
 * state-changing request made with it must also carry the session's CSRF token (an HMAC of its nonce) and
 * come from the dashboard's own origin (csrf.ts).
 */
import { timingSafeEqual } from "hono/utils/buffer";

/** The cookie's name. */
const SESSION_COOKIE = "floodgate_session";
/** How long a sign-in lasts, ms. */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;

const encoder = new TextEncoder();
/** What the token is bound to before it becomes a signing key: a key for nothing but dashboard sessions. */
const KEY_LABEL = "floodgate dashboard session v1";

/** A verified session. */
export interface Session {
  /** Random, per sign-in; the CSRF token is derived from it. */
  nonce: string;
  expiresAtMs: number;
  /** The sign-out count it was issued under (its key's). */
  epoch: number;
}

/** WebCrypto's key type, named without the DOM/Workers-only global `CryptoKey` (the library builds on Node too). */
type HmacKey = Awaited<ReturnType<typeof crypto.subtle.importKey>>;

// One derived key per token and sign-out count per isolate (deriving costs two WebCrypto calls). Finished keys only.
const keys = new Map<string, HmacKey>();

async function sessionKey(adminToken: string, epoch: number): Promise<HmacKey> {
  const id = `${epoch}\n${adminToken}`;
  const cached = keys.get(id);
  if (cached) return cached;
  const tokenKey = await hmacKey(encoder.encode(adminToken));
  // Before any sign-out, the label of old: cookies issued before sign-outs revoked sessions stay valid.
  const label = epoch === 0 ? KEY_LABEL : `${KEY_LABEL} epoch ${epoch}`;
  const derived = await crypto.subtle.sign("HMAC", tokenKey, encoder.encode(label));
  const key = await hmacKey(new Uint8Array(derived));
  if (keys.size > 4) keys.clear();
  keys.set(id, key);
  return key;
}

const hmacKey = (raw: Uint8Array) =>
  crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign", "verify"]);

const base64url = (bytes: Uint8Array): string => {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
};

function fromBase64url(text: string): Uint8Array | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return undefined;
  try {
    const binary = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
    return Uint8Array.from(binary, (ch) => ch.charCodeAt(0));
  } catch {
    return undefined; // e.g. a length no base64 has: a forged cookie, not a server error
  }
}

async function sign(adminToken: string, epoch: number, payload: string): Promise<string> {
  const key = await sessionKey(adminToken, epoch);
  const signature = await crypto.subtle.sign("HMAC", key, encoder.encode(payload));
  return base64url(new Uint8Array(signature));
}

/** A new session cookie value, valid from `nowMs` for `SESSION_TTL_MS` or until the next sign-out (`epoch`). */
export async function createSession(adminToken: string, nowMs = Date.now(), epoch = 0): Promise<string> {
  const nonce = base64url(crypto.getRandomValues(new Uint8Array(16)));
  const payload = `${nowMs + SESSION_TTL_MS}.${nonce}`;
  return `${payload}.${await sign(adminToken, epoch, payload)}`;
}

/**
 * The session a cookie value carries, or `undefined` when it is malformed, forged, expired, or was issued
 * before the latest sign-out (`epoch`, the current count).
 */
export async function verifySession(
  adminToken: string,
  value: string,
  nowMs = Date.now(),
  epoch = 0,
): Promise<Session | undefined> {
  const [expires, nonce, signature, extra] = value.split(".");
  if (!expires || !nonce || !signature || extra !== undefined || !/^\d{1,15}$/.test(expires))
    return undefined;
  const signatureBytes = fromBase64url(signature);
  if (!signatureBytes) return undefined;
  // `verify` compares in constant time.
  const valid = await crypto.subtle.verify(
    "HMAC",
    await sessionKey(adminToken, epoch),
    signatureBytes,
    encoder.encode(`${expires}.${nonce}`),
  );
  const expiresAtMs = Number(expires);
  if (!valid || expiresAtMs <= nowMs) return undefined;
  return { nonce, expiresAtMs, epoch };
}

/** The CSRF token of a session: the page sends it back in `X-Floodgate-CSRF` with every change. */
export const csrfToken = (adminToken: string, session: Session): Promise<string> =>
  sign(adminToken, session.epoch, `csrf.${session.nonce}`);

/** Whether `presented` is the session's CSRF token (compared in constant time). */
export async function validCsrf(
  adminToken: string,
  session: Session,
  presented: string | null,
): Promise<boolean> {
  if (!presented) return false;
  return timingSafeEqual(presented, await csrfToken(adminToken, session));
}

/** The session cookie's value in a `Cookie` header, if any. */
export function sessionCookieOf(cookieHeader: string | null): string | undefined {
  if (!cookieHeader) return undefined;
  for (const part of cookieHeader.split(";")) {
    const eq = part.indexOf("=");
    if (eq !== -1 && part.slice(0, eq).trim() === SESSION_COOKIE) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** `Set-Cookie` for a new session (`value`) or for signing out (`undefined`). */
export function sessionCookieHeader(value: string | undefined, secure: boolean, path: string): string {
  const attributes = [`Path=${path}`, "HttpOnly", "SameSite=Strict"];
  if (secure) attributes.push("Secure");
  if (value === undefined) return [`${SESSION_COOKIE}=`, "Max-Age=0", ...attributes].join("; ");
  return [`${SESSION_COOKIE}=${value}`, `Max-Age=${SESSION_TTL_MS / 1000}`, ...attributes].join("; ");
}
