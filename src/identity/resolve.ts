/**
 * Who is this? Turns a rule's key (and tier) into the identity string that is hashed into the Redis key.
 * The admin API names identities the same way, so `identityOf` is the one function that defines them:
 * a single part is its raw value (an API key, a claim, a canonical IP, an `ip/64` prefix);
 * a composite key joins its percent-encoded parts with `|`.
 */
import type { KeyPart, RuleConfig } from "../config";
import { canonicalIp, ipPrefix64 } from "./ip";
import type { RequestFacts } from "./request";

/** The identity of a key (all its parts), or `undefined` if any part is missing. */
export async function identityOfKey(
  parts: readonly KeyPart[],
  request: RequestFacts,
): Promise<string | undefined> {
  return joinParts(await Promise.all(parts.map((part) => request.part(part))));
}

/** Whether a key has a `jwt:` part, the one kind that cannot be read without waiting (verification). */
export const needsVerification = (parts: readonly KeyPart[] | undefined): boolean =>
  parts?.some((part) => part.kind === "jwt") ?? false;

/**
 * {@link identityOfKey} at once, for a key without a `jwt:` part (see {@link needsVerification}): the same
 * identity, without a promise per part on the request's path.
 */
export function plainIdentityOfKey(parts: readonly KeyPart[], request: RequestFacts): string | undefined {
  if (parts.length === 1) return request.plainPart(parts[0] as Exclude<KeyPart, { kind: "jwt" }>);
  return joinParts(parts.map((part) => request.plainPart(part as Exclude<KeyPart, { kind: "jwt" }>)));
}

function joinParts(values: readonly (string | undefined)[]): string | undefined {
  if (values.some((value) => value === undefined)) return undefined;
  if (values.length === 1) return values[0];
  return (values as string[]).map(encodeURIComponent).join("|");
}

/** How a rule sees a request: an identity (maybe the IP fallback), skip it, or deny it (401). */
export type RuleIdentity =
  | { kind: "identity"; identity: string; fallback: boolean }
  | { kind: "skip" }
  | { kind: "deny" };

/**
 * THE function that turns (rule, request) into the identity string to hash with `hashIdentity`.
 * A missing key follows the rule's `missing`: `ip` (default) falls back to the client IP.
 */
export async function identityOf(rule: RuleConfig, request: RequestFacts): Promise<RuleIdentity> {
  return identityOfValue(rule, request, await identityOfKey(rule.key, request));
}

/** {@link identityOf} at once, for a rule whose key has no `jwt:` part (see {@link needsVerification}). */
export function plainIdentityOf(rule: RuleConfig, request: RequestFacts): RuleIdentity {
  return identityOfValue(rule, request, plainIdentityOfKey(rule.key, request));
}

function identityOfValue(
  rule: RuleConfig,
  request: RequestFacts,
  identity: string | undefined,
): RuleIdentity {
  if (identity !== undefined) return { kind: "identity", identity, fallback: false };
  if (rule.missing === "skip") return { kind: "skip" };
  if (rule.missing === "deny") return { kind: "deny" };
  return { kind: "identity", identity: request.clientIp(), fallback: true };
}

/** The client's tier for a rule with `tier`/`tiers`, or `undefined` (the rule's own limits apply). */
export async function tierOf(rule: RuleConfig, request: RequestFacts): Promise<string | undefined> {
  if (rule.tier === undefined) return undefined;
  return knownTier(rule, await identityOfKey(rule.tier, request));
}

/** {@link tierOf} at once, for a rule whose `tier` has no `jwt:` part. */
export function plainTierOf(rule: RuleConfig, request: RequestFacts): string | undefined {
  if (rule.tier === undefined) return undefined;
  return knownTier(rule, plainIdentityOfKey(rule.tier, request));
}

const knownTier = (rule: RuleConfig, tier: string | undefined): string | undefined =>
  tier !== undefined && Object.hasOwn(rule.tiers, tier) ? tier : undefined;

/**
 * An identity as an operator types it (admin API paths), in the form the proxy would compute:
 * IPs are canonicalised and `ip/64` accepts an address or a prefix. Everything else is used as given.
 */
export function canonicalIdentity(rule: RuleConfig, identity: string): string {
  if (rule.key.length !== 1) return identity;
  const kind = rule.key[0]?.kind;
  if (kind === "ip") return canonicalIp(identity);
  if (kind === "ip64") return ipPrefix64(identity);
  return identity;
}
