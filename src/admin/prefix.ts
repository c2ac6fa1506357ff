/**
 * Where the admin API and the dashboard live (README "Operating Floodgate"): every path under it is theirs,
 * never rate-limited and never proxied.
 */
export const ADMIN_PREFIX = "/__floodgate";

/**
 * Whether a request's canonical path (src/rules/path.ts) lies under the prefix, in any case. Only the exact
 * spelling reaches the admin app; any other (`//__floodgate/…`, `/__floodgate%2F…`, `/__FLOODGATE/…`, from an
 * operator's typo) is never proxied either: it would carry the admin token to the origin.
 */
export function underAdminPrefix(path: string): boolean {
  if (path.charCodeAt(1) !== 95) return false; // not "/_": the common case, for one comparison
  const head = path.slice(0, ADMIN_PREFIX.length + 1).toLowerCase();
  return head === ADMIN_PREFIX || head === `${ADMIN_PREFIX}/`;
}
