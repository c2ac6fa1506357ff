/**
 * `jwt:<claim>` keys without the verifier: the bearer token of a request, a claim of its verified payload, and
 * what a verifier is. The verifier itself (jose.ts) is kept apart, so that the package's main entry, which
 * reads tokens only through a verifier an app hands it (`hono-floodgate/jwt`), bundles no `jose`.
 * An unverified claim is forgeable: a token is read only through a verifier.
 */
import type { JWTPayload } from "jose";
import type { WaitUntil } from "../engine/types";

/**
 * Verifies a compact JWT and returns its payload, or `undefined` when it cannot be trusted.
 * Rejects with `JwksUnavailableError` when the JWKS it needs could not be had in time. `waitUntil` (the
 * request's) keeps a JWKS fetch going after the request stops waiting for it.
 */
export type JwtVerifier = ((token: string, waitUntil?: WaitUntil) => Promise<JWTPayload | undefined>) & {
  /** What this isolate last knew of its JWKS, for health; absent without a JWKS URL. */
  jwks?: () => JwksHealth;
};

/**
 * The JWKS as this isolate last knew it, without fetching it (docs/operating.md, "Health"): `unknown` until a fetch has
 * ended, then whether the last one brought a key set (`ok`) or not (`unavailable`, until it may be asked
 * again: then `unknown`).
 */
export interface JwksHealth {
  status: "ok" | "unavailable" | "unknown";
  /** Whether a key set fetched earlier is at hand: while the JWKS is unavailable, it still verifies tokens. */
  lastKnownKeys: boolean;
}

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

/** How tokens are verified; at least one must be set for a rule to use `jwt:` keys. */
export interface JwtOptions {
  /** Shared secret for HS256/384/512. */
  secret?: string | undefined;
  /**
   * JWKS endpoint for RS*, PS*, ES* and EdDSA; fetched lazily, cached by jose, waited for at most the
   * middleware's `timeoutMs` (docs/failure-modes.md).
   */
  jwksUrl?: URL | string | undefined;
  /**
   * The `aud` a token must carry (one of these): a token minted for another service of the same issuer is then
   * no identity here. Unset = any audience (docs/security.md).
   */
  audience?: string | string[] | undefined;
  /** The `iss` a token must carry (one of these). Unset = any issuer the key verifies. */
  issuer?: string | string[] | undefined;
}

/**
 * Builds a verifier once per isolate from the key material (`undefined` when there is none to check tokens
 * with): jose.ts's `createJwtVerifier`, which the package exports as `joseVerifier` from `hono-floodgate/jwt`.
 * @param timeoutMs the longest a request waits for a JWKS
 */
export type JwtVerifierFactory = (
  options: JwtOptions,
  budget: { timeoutMs: number },
) => JwtVerifier | undefined;

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
