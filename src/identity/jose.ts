/**
 * `jwt:<claim>` keys: the bearer token's signature is verified with `jose` before any claim is trusted
 * (an unverified claim is forgeable). HS* tokens against `RATE_LIMIT_JWT_SECRET`, everything else against
 * `RATE_LIMIT_JWKS_URL`; `aud`/`iss` against `RATE_LIMIT_JWT_AUDIENCE`/`_ISSUER` when set. Invalid, expired, foreign or
 * absent tokens yield `undefined` (the rule's `missing` decides);
 * a token that cannot be checked because the JWKS is unreachable is not the client's fault, and rejects with
 * `JwksUnavailableError` instead (docs/failure-modes.md).
 */
import {
  createLocalJWKSet,
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors,
  type JWTVerifyGetKey,
  jwtVerify,
} from "jose";
import type { WaitUntil } from "../engine/types";
import { within } from "../util/timer";
import {
  JWKS_RETRY_MS,
  type JwksHealth,
  JwksUnavailableError,
  type JwtOptions,
  type JwtVerifier,
} from "./jwt";

const HMAC_ALGORITHMS = ["HS256", "HS384", "HS512"];
const ASYMMETRIC_ALGORITHMS = [
  "RS256",
  "RS384",
  "RS512",
  "PS256",
  "PS384",
  "PS512",
  "ES256",
  "ES384",
  "ES512",
  "EdDSA",
  "Ed25519",
];

/**
 * Builds a verifier once (per isolate): the key material is prepared here, not per request. `undefined` when
 * neither a secret nor a JWKS URL is given (an empty one is none): no token can be checked.
 * @param timeoutMs the longest a request waits for the JWKS: its decision budget (`RATE_LIMIT_TIMEOUT_MS`,
 *   the middleware's `timeoutMs`); the fetch itself may take jose's 5 s, and then serves the requests after
 */
export function createJwtVerifier(
  { secret, jwksUrl, audience, issuer }: JwtOptions,
  { timeoutMs }: { timeoutMs: number },
): JwtVerifier | undefined {
  if (!secret && !jwksUrl) return undefined;
  const hmacKey = secret === undefined ? undefined : new TextEncoder().encode(secret);
  const jwks = jwksUrl === undefined ? undefined : remoteKeys(new URL(jwksUrl), timeoutMs);
  // jose checks `exp`/`nbf` always, and `aud`/`iss` when given (a token without them then fails).
  const claims = {
    ...(audience === undefined ? {} : { audience }),
    ...(issuer === undefined ? {} : { issuer }),
  };
  const verify: JwtVerifier = async (token, waitUntil) => {
    try {
      const { alg } = decodeProtectedHeader(token);
      if (alg !== undefined && HMAC_ALGORITHMS.includes(alg)) {
        if (!hmacKey) return undefined;
        return (await jwtVerify(token, hmacKey, { algorithms: HMAC_ALGORITHMS, ...claims })).payload;
      }
      if (!jwks) return undefined;
      return (
        await jwtVerify(token, jwks.keysFor(waitUntil), { algorithms: ASYMMETRIC_ALGORITHMS, ...claims })
      ).payload;
    } catch (error) {
      if (error instanceof JwksUnavailableError) throw error;
      // Malformed, badly signed, expired, not yet valid, or no key of the JWKS fits: not an identity.
      return undefined;
    }
  };
  if (jwks) verify.jwks = jwks.health;
  return verify;
}

/** jose's codes for a JWKS that could not be had: no answer in time, not `200` with JSON, not a key set. */
const UNAVAILABLE_CODES = new Set(["ERR_JWKS_TIMEOUT", "ERR_JOSE_GENERIC", "ERR_JWKS_INVALID"]);

/**
 * The JWKS's keys as jose fetches and caches them (refetched when stale, or for an unknown `kid` after its
 * cooldown), for one request: it waits for a fetch at most `waitMs`, and the fetch goes on under its
 * `waitUntil`, so a JWKS slower than the budget still lands in the cache for the requests after it. While a
 * fetch is on its way, or for `JWKS_RETRY_MS` after one failed (jose would try again on every request), no
 * other is sent: the key set had before serves (a token whose `kid` it lacks is then the token's problem),
 * and without one the lookup fails at once. A failure logs one line, never the URL (it may carry a secret)
 * nor the error's text. `health` tells how the last fetch ended, and fetches nothing.
 */
function remoteKeys(
  url: URL,
  waitMs: number,
): { keysFor: (waitUntil?: WaitUntil) => JWTVerifyGetKey; health: () => JwksHealth } {
  const keys = createRemoteJWKSet(url);
  let retryAt = 0;
  // How the last fetch sent below ended, `undefined` until one has (jose's refetch of a fresh set for an
  // unknown `kid` is not seen here).
  let lastFetch: "ok" | "unavailable" | undefined;
  const failed = (error: unknown): void => {
    // The token's own fault (no key with its `kid`): the JWKS did answer, with a key set.
    lastFetch = tokensOwn(error) ? "ok" : "unavailable";
    if (lastFetch === "ok") return;
    if (Date.now() >= retryAt) {
      console.warn(
        `floodgate: the JWKS (RATE_LIMIT_JWKS_URL (Worker) / jwt.jwksUrl (middleware)) could not be fetched (${failureText(error)}); it is not asked again for ${JWKS_RETRY_MS / 1000} s, and meanwhile tokens that no key fetched before can check follow each rule's failure policy`,
      );
    }
    retryAt = Date.now() + JWKS_RETRY_MS;
  };
  /** The key set had before; without one, a `JwksUnavailableError` saying when to retry. */
  const lastKnown = (retryAfterMs: number): JWTVerifyGetKey => {
    const jwks = keys.jwks();
    if (jwks === undefined) throw new JwksUnavailableError(retryAfterMs);
    return createLocalJWKSet(jwks);
  };
  const keysFor: (waitUntil?: WaitUntil) => JWTVerifyGetKey = (waitUntil) => async (header, token) => {
    const now = Date.now();
    if (now < retryAt) return lastKnown(retryAt - now)(header, token);
    if (keys.reloading) return lastKnown(Math.max(1000, waitMs))(header, token);
    // A fresh key set answers at once, with no timer: jose fetches only for a `kid` it lacks (that token's
    // request alone waits for it, and a failure makes that token unverified).
    if (keys.fresh) return keys(header, token);
    const lookup = keys(header, token);
    // Whoever waits, a failure is recorded (and logged once); a fetch this request stops waiting for goes on.
    const landed = lookup.then(() => {
      lastFetch = "ok";
    }, failed);
    waitUntil?.(landed);
    const key = await within(lookup, waitMs).catch((error: unknown) => {
      if (tokensOwn(error)) throw error;
      return undefined;
    });
    if (key !== undefined) return key;
    // Failed, or not in time (the fetch goes on, and the requests after this one get its key set).
    return lastKnown(now < retryAt ? retryAt - Date.now() : Math.max(1000, waitMs))(header, token);
  };
  // A failure is news only until the JWKS may be asked again: after that, with no request needing it since,
  // nobody knows (an isolate without JWT traffic would otherwise stay `degraded` for good).
  const health = (): JwksHealth => ({
    status: lastFetch === "unavailable" && Date.now() >= retryAt ? "unknown" : (lastFetch ?? "unknown"),
    lastKnownKeys: keys.jwks() !== undefined,
  });
  return { keysFor, health };
}

/** Whether a JWKS lookup's `error` is the token's own (no key with its `kid`, a key it cannot use). */
const tokensOwn = (error: unknown): boolean =>
  error instanceof errors.JOSEError && !UNAVAILABLE_CODES.has(error.code);

/** What went wrong, in words that hold no part of the URL. */
function failureText(error: unknown): string {
  if (!(error instanceof errors.JOSEError)) return "the request failed";
  if (error.code === "ERR_JWKS_TIMEOUT") return "no answer within 5 s";
  if (error.code === "ERR_JWKS_INVALID") return "the answer is not a JSON Web Key Set";
  return "the answer was not 200 with JSON";
}
