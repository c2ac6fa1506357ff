/**
 * `jwt:<claim>` keys: the bearer token's signature is verified with `jose` before any claim is trusted
 * (an unverified claim is forgeable). HS* tokens against `RATE_LIMIT_JWT_SECRET`, everything else against
 * `RATE_LIMIT_JWKS_URL`. Invalid, expired or absent tokens yield `undefined` (the rule's `missing` decides).
 */
import { createRemoteJWKSet, decodeProtectedHeader, type JWTPayload, jwtVerify } from "jose";

/** Verifies a compact JWT and returns its payload, or `undefined` when it cannot be trusted. */
export type JwtVerifier = (token: string) => Promise<JWTPayload | undefined>;

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
  /** JWKS endpoint for RS*, PS*, ES* and EdDSA; fetched lazily and cached by jose. */
  jwksUrl?: URL | string | undefined;
}

/** Builds a verifier once (per isolate): the key material is prepared here, not per request. */
export function createJwtVerifier({ secret, jwksUrl }: JwtOptions): JwtVerifier {
  const hmacKey = secret === undefined ? undefined : new TextEncoder().encode(secret);
  const jwks = jwksUrl === undefined ? undefined : createRemoteJWKSet(new URL(jwksUrl));
  return async (token) => {
    try {
      const { alg } = decodeProtectedHeader(token);
      if (alg !== undefined && HMAC_ALGORITHMS.includes(alg)) {
        if (!hmacKey) return undefined;
        return (await jwtVerify(token, hmacKey, { algorithms: HMAC_ALGORITHMS })).payload;
      }
      if (!jwks) return undefined;
      return (await jwtVerify(token, jwks, { algorithms: ASYMMETRIC_ALGORITHMS })).payload;
    } catch {
      // Malformed, badly signed, expired, not yet valid, or the JWKS is unreachable: not an identity.
      return undefined;
    }
  };
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
