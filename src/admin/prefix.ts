/**
 * Where the admin API and the dashboard live (README "Operating Floodgate"): every path under it is theirs,
 * never rate-limited and never proxied.
 */
export const ADMIN_PREFIX = "/__floodgate";
