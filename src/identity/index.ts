/** Who is this request? See `resolve.ts` for how identities are named and `ip.ts` for the client IP. */
export { canonicalIp, clientIpFrom, ipPrefix64, UNKNOWN_IP } from "./ip";
export {
  bearerToken,
  claimValue,
  createJwtVerifier,
  type JwksHealth,
  JwksUnavailableError,
  type JwtOptions,
  type JwtVerifier,
} from "./jwt";
export {
  canonicalIdentity,
  type IdentityOptions,
  identityOf,
  identityOfKey,
  needsVerification,
  plainIdentityOf,
  plainTierOf,
  RequestIdentity,
  type RuleIdentity,
  tierOf,
  UnparseableUrlError,
} from "./resolve";
