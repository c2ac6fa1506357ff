import { decodedPath } from "../rules/path";

/**
 * Where the admin API and the dashboard live (docs/operating.md): every path under it is theirs,
 * never rate-limited and never proxied.
 */
export const ADMIN_PREFIX = "/__floodgate";

/**
 * Whether a request's path lies under the prefix, in any case: its canonical path (src/rules/path.ts), or, when
 * it has escapes, its decoded path before dot segments are resolved (`/__floodgate%2F..%2Fc/x`, which an origin
 * may route as the prefix). Only the exact spelling reaches the admin app; any other (`//__floodgate/…`,
 * `/__floodgate%2F…`, `/__FLOODGATE/…`, from an operator's typo) is never proxied either: it would carry the
 * admin token to the origin.
 */
export function underAdminPrefix(canonical: string, pathname: string): boolean {
  return startsWithPrefix(canonical) || (pathname.includes("%") && startsWithPrefix(decodedPath(pathname)));
}

function startsWithPrefix(path: string): boolean {
  if (path.charCodeAt(1) !== 95) return false; // not "/_": the common case, for one comparison
  const head = path.slice(0, ADMIN_PREFIX.length + 1).toLowerCase();
  return head === ADMIN_PREFIX || head === `${ADMIN_PREFIX}/`;
}
