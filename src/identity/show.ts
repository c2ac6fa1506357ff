/**
 * How a hashed identity is shown outside Redis (admin lists, log lines): `hash:<hash>`, which the admin
 * API accepts back as a path's `:identity` (src/admin/identity.ts). Raw identities are never shown.
 */

/** The prefix that names a hashed identity. */
export const HASH_PREFIX = "hash:";

/** How a hashed identity is shown. */
export const showHash = (identityHash: string): string => `${HASH_PREFIX}${identityHash}`;
