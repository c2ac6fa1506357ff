/**
 * `:identity` in admin paths: the raw value a rule's key extracts (an API key, a client IP, the canonical
 * `ip/64` prefix, a composite `a|b`), URL-decoded exactly once and hashed exactly as the proxy hashes it,
 * or `hash:<hashed form>` to name a hashed identity directly: the 22-character base64url that `hashIdentity`
 * produces and lists show, or the same 16 bytes as 32 hex digits (docs/operating.md, "Naming a client", says `hash:<hex>`).
 */
import type { RuleConfig } from "../config";
import { hashFromHex, hashIdentity } from "../engine/keys";
import { canonicalIdentity } from "../identity";
import { HASH_PREFIX } from "../identity/show";
import { badRequest } from "./problem";

export { showHash } from "../identity/show";

const HASHED = /^[A-Za-z0-9_-]{22}$/;

/**
 * The path after `/<segment>/<rule>/` of the request URL, decoded once. Read from the raw URL (not the
 * router's already-decoded parameter) so the decoding happens once and only once, and so an `ip/64` prefix
 * may be sent with its `/` as is (`…/2001:db8:1:2::/64`) or as `%2F`.
 */
export function rawIdentity(url: string, segment: string, rule: string): string {
  const pathname = new URL(url).pathname;
  const marker = `/${segment}/`;
  const start = pathname.indexOf(marker);
  const afterSegment = pathname.slice(start + marker.length);
  const slash = afterSegment.indexOf("/");
  const encoded = slash === -1 ? "" : afterSegment.slice(slash + 1);
  if (!encoded) throw badRequest(`No identity given after /${segment}/${rule}/.`);
  try {
    return decodeURIComponent(encoded);
  } catch {
    throw badRequest("The identity is not valid percent-encoding.");
  }
}

/**
 * The hashed identity an admin path names under `rule`: raw values are first put in the form the proxy
 * computes (`2001:DB8::1` and `2001:db8::1` are one client; `ip/64` takes an address or its prefix).
 */
export async function resolveIdentityHash(rule: RuleConfig, identity: string): Promise<string> {
  if (!identity.startsWith(HASH_PREFIX)) return hashIdentity(canonicalIdentity(rule, identity));
  const hashed = identity.slice(HASH_PREFIX.length);
  if (HASHED.test(hashed)) return hashed;
  const fromHex = hashFromHex(hashed);
  if (fromHex !== undefined) return fromHex;
  throw badRequest(
    "`hash:` must be followed by a hashed identity: 22 characters of base64url, as lists show, or 32 hex digits.",
  );
}
