/**
 * Who is this request? See `request.ts` for its facts, `resolve.ts` for how identities are named and `ip.ts`
 * for the client IP.
 */
export { canonicalIp, clientIpFrom, ipPrefix64, UNKNOWN_IP } from "./ip";
export {
  bearerToken,
  claimValue,
  type JwksHealth,
  JwksUnavailableError,
  type JwtOptions,
  type JwtVerifier,
  type JwtVerifierFactory,
} from "./jwt";
export { type IdentityOptions, RequestFacts, UnparseableUrlError } from "./request";
export {
  canonicalIdentity,
  identityOf,
  identityOfKey,
  needsVerification,
  plainIdentityOf,
  plainIdentityOfKey,
  plainTierOf,
  type RuleIdentity,
  tierOf,
} from "./resolve";
