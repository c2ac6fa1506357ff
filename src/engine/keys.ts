/**
 * Redis key layout (CONTRACT §5): `<prefix>:<rule>:<hash>`, overrides at `<prefix>:override:<rule>:<hash>`.
 * Identities are hashed before they reach a key, so raw API keys, tokens and IPs are never stored and no
 * identity can smuggle `:`, `{` or `*` into a key of another rule or tenant.
 */

const encoder = new TextEncoder();

/** Hashed identity: SHA-256 of the UTF-8 identity, first 16 bytes, base64url (22 characters). */
export async function hashIdentity(identity: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", encoder.encode(identity));
  return toBase64Url(new Uint8Array(digest, 0, 16));
}

/** The state key of one identity under one rule. */
export const stateKey = (prefix: string, rule: string, identityHash: string): string =>
  `${prefix}:${rule}:${identityHash}`;

/** The override hash of one identity under one rule (fields `limit`, `period`, `burst`). */
export const overrideKey = (prefix: string, rule: string, identityHash: string): string =>
  `${prefix}:override:${rule}:${identityHash}`;

function toBase64Url(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
