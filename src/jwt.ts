/**
 * `hono-floodgate/jwt`: the verifier of `jwt:<claim>` keys, with `jose`. An entry of its own, so that an app
 * whose rules read no token bundles no `jose` (about 20 KB minified): the main entry takes a verifier as the
 * `jwt.verifier` option and never imports one.
 *
 * @example
 * import { rateLimit } from "hono-floodgate";
 * import { joseVerifier } from "hono-floodgate/jwt";
 *
 * app.use("/api/*", rateLimit((c) => ({
 *   redis: { url: c.env.UPSTASH_REDIS_REST_URL, token: c.env.UPSTASH_REDIS_REST_TOKEN },
 *   jwt: { secret: c.env.JWT_SECRET, verifier: joseVerifier },
 *   rules: [{ name: "per-user", key: "jwt:sub", algorithm: "gcra", limit: 100, period: "1m" }],
 * })));
 */
import type { JwtVerifierFactory } from "./identity/jwt";
import { createJwtVerifier } from "./identity/jose";

export type { JwksHealth, JwtOptions, JwtVerifier, JwtVerifierFactory } from "./identity/jwt";

/**
 * Verifies bearer tokens with `jose`: HS256/384/512 against `secret`, RS*, PS*, ES* and EdDSA against the keys
 * of `jwksUrl` (fetched lazily, cached, waited for at most the middleware's `timeoutMs`), `aud`/`iss` against
 * `audience`/`issuer` when given; expired, not yet valid, badly signed or malformed tokens are no identity.
 */
export const joseVerifier: JwtVerifierFactory = createJwtVerifier;
