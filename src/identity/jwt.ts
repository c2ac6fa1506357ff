/**
 * `jwt:<claim>` keys: the bearer token's signature is verified with `jose` before any claim is trusted
 * (an unverified claim is forgeable). HS* tokens against `RATE_LIMIT_JWT_SECRET`, everything else against
 * `RATE_LIMIT_JWKS_URL`. Invalid, expired or absent tokens yield `undefined` (the rule's `missing` decides);
 * a token that cannot be checked because the JWKS is unreachable is not the client's fault, and rejects with
 * `JwksUnavailableError` instead (README "When things fail").
 */
import {
  createRemoteJWKSet,
  decodeProtectedHeader,
  errors,
  type JWTPayload,
  type JWTVerifyGetKey,
  jwtVerify,
} from "jose";

/**
 * Verifies a compact JWT and returns its payload, or `undefined` when it cannot be trusted.
 * Rejects with `JwksUnavailableError` when the JWKS it needs could not be fetched.
 */
export type JwtVerifier = (token: string) => Promise<JWTPayload | undefined>;

/**
 * How long a JWKS that could not be fetched is not asked again, ms: meanwhile tokens it would check are
 * answered at once instead of each waiting for a fetch that just failed.
 */
export const JWKS_RETRY_MS = 5000;

/** The JWKS could not be fetched (no answer in time, an error status, not a key set), so the token cannot be checked. */
export class JwksUnavailableError extends Error {
  override readonly name = "JwksUnavailableError";
  /** @param retryAfterMs until the JWKS is asked again */
  constructor(readonly retryAfterMs: number) {
    super("the JWKS could not be fetched");
  }
}

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

/** How tokens are verified; at least one must be set for a rule to use `jwt:` keys. */
export interface JwtOptions {
  /** Shared secret for HS256/384/512. */
  secret?: string | undefined;
  /**
   * JWKS endpoint for RS*, PS*, ES* and EdDSA; fetched lazily, cached by jose, waited for at most the
   * middleware's `timeoutMs` (README "When things fail").
   */
  jwksUrl?: URL | string | undefined;
}

/**
 * Builds a verifier once (per isolate): the key material is prepared here, not per request.
 * @param timeoutMs the longest wait for the JWKS: the request's decision budget (`RATE_LIMIT_TIMEOUT_MS`,
 *   the middleware's `timeoutMs`), instead of jose's 5 s
 */
export function createJwtVerifier(
  { secret, jwksUrl }: JwtOptions,
  { timeoutMs }: { timeoutMs: number },
): JwtVerifier {
  const hmacKey = secret === undefined ? undefined : new TextEncoder().encode(secret);
  const jwks = jwksUrl === undefined ? undefined : remoteKeys(new URL(jwksUrl), timeoutMs);
  return async (token) => {
    try {
      const { alg } = decodeProtectedHeader(token);
      if (alg !== undefined && HMAC_ALGORITHMS.includes(alg)) {
        if (!hmacKey) return undefined;
        return (await jwtVerify(token, hmacKey, { algorithms: HMAC_ALGORITHMS })).payload;
      }
      if (!jwks) return undefined;
      return (await jwtVerify(token, jwks, { algorithms: ASYMMETRIC_ALGORITHMS })).payload;
    } catch (error) {
      if (error instanceof JwksUnavailableError) throw error;
      // Malformed, badly signed, expired, not yet valid, or no key of the JWKS fits: not an identity.
      return undefined;
    }
  };
}

/** jose's codes for a JWKS that could not be had: no answer in time, not `200` with JSON, not a key set. */
const UNAVAILABLE_CODES = new Set(["ERR_JWKS_TIMEOUT", "ERR_JOSE_GENERIC", "ERR_JWKS_INVALID"]);

/**
 * The JWKS's keys as jose fetches and caches them (refetched when stale, or for an unknown `kid` after its
 * cooldown), each fetch bounded by `timeoutMs`. A failed fetch rejects every lookup for the next
 * `JWKS_RETRY_MS` at once (jose itself would try again on every request) and logs one line, never the URL
 * (it may carry a secret) nor the error's text.
 */
function remoteKeys(url: URL, timeoutMs: number): JWTVerifyGetKey {
  const keys = createRemoteJWKSet(url, { timeoutDuration: timeoutMs });
  let retryAt = 0;
  return async (header, token) => {
    const now = Date.now();
    if (now < retryAt) throw new JwksUnavailableError(retryAt - now);
    try {
      return await keys(header, token);
    } catch (error) {
      // A JOSE error of its own kind (no key with that `kid`, an unsupported key) is the token's problem.
      if (error instanceof errors.JOSEError && !UNAVAILABLE_CODES.has(error.code)) throw error;
      retryAt = Date.now() + JWKS_RETRY_MS;
      console.warn(
        `floodgate: the JWKS (RATE_LIMIT_JWKS_URL (Worker) / jwt.jwksUrl (middleware)) could not be fetched (${failureText(error, timeoutMs)}); for the next ${JWKS_RETRY_MS / 1000} s tokens it would check cannot be verified, and each rule keyed on them follows its failure policy`,
      );
      throw new JwksUnavailableError(JWKS_RETRY_MS);
    }
  };
}

/** What went wrong, in words that hold no part of the URL. */
function failureText(error: unknown, timeoutMs: number): string {
  if (!(error instanceof errors.JOSEError)) return "the request failed";
  if (error.code === "ERR_JWKS_TIMEOUT") return `no answer within ${timeoutMs} ms`;
  if (error.code === "ERR_JWKS_INVALID") return "the answer is not a JSON Web Key Set";
  return "the answer was not 200 with JSON";
}

/** The bearer token of a request (`Authorization: Bearer <jwt>`), if any. */
export function bearerToken(headers: Headers): string | undefined {
  const match = /^Bearer\s+([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)\s*$/i.exec(
    headers.get("authorization") ?? "",
  );
  return match?.[1];
}

/** A claim as text: `sub`, or a dotted path (`org.id`) when no claim has that exact name. Objects are not identities. */
export function claimValue(payload: JWTPayload, claim: string): string | undefined {
  let value: unknown = payload[claim];
  if (value === undefined && claim.includes(".")) {
    value = claim
      .split(".")
      .reduce<unknown>(
        (node, part) =>
          node && typeof node === "object" ? (node as Record<string, unknown>)[part] : undefined,
        payload,
      );
  }
  if (typeof value === "string") return value === "" ? undefined : value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return undefined;
}
