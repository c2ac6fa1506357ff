/**
 * How a hashed identity is shown outside Redis (admin lists, log lines): `hash:<hash>`, which the admin
 * API accepts back as a path's `:identity` (src/admin/identity.ts). Raw identities are never shown; with
 * `RATE_LIMIT_DASHBOARD_HINTS` on, the dashboard shows a masked hint beside the hash ({@link maskIdentity}).
 */

/** The prefix that names a hashed identity. */
export const HASH_PREFIX = "hash:";

/** How a hashed identity is shown. */
export const showHash = (identityHash: string): string => `${HASH_PREFIX}${identityHash}`;

/** An IPv4 address: its first three octets, the network an operator blocks upstream. */
const IPV4 = /^(\d{1,3}\.\d{1,3}\.\d{1,3})\.\d{1,3}$/;
/** An IPv6 address or prefix (`ip/64` keys): hex groups, colons, maybe a length. */
const IPV6 = /^[0-9a-f]{0,4}(:[0-9a-f]{0,4}){2,7}(\/\d{1,3})?$/i;

/**
 * A hint of who an identity is, too little to be it (docs/operating.md, "Hints"): an IPv4 address's /24
 * (`203.0.113.x`), an IPv6 address's first two groups (`2001:db8:…`), and of anything else (an API key, a
 * user id, an email, a composite key) at most its first three characters and never more than a third of it
 * (`mallory@example.com` → `mal…`, `bob` → `…`).
 */
export function maskIdentity(identity: string): string {
  const v4 = IPV4.exec(identity);
  if (v4) return `${v4[1]}.x`;
  if (IPV6.test(identity)) return `${identity.split(":").slice(0, 2).join(":")}:…`;
  const chars = [...identity];
  return `${chars.slice(0, Math.min(3, Math.floor(chars.length / 3))).join("")}…`;
}
