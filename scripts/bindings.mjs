// The env bindings the README's "Configuration" names, for the Node-side tools that read them from the environment
// (`npm start`'s env file, `npm run check-config`). The Worker's own type of them is src/env.ts.

/** Every binding Floodgate reads. */
export const BINDINGS = [
  "ORIGIN_URL",
  "UPSTASH_REDIS_REST_URL",
  "UPSTASH_REDIS_REST_TOKEN",
  "RATE_LIMIT_RULES",
  "RATE_LIMIT_MODE",
  "RATE_LIMIT_FAILURE",
  "RATE_LIMIT_TIMEOUT_MS",
  "RATE_LIMIT_LEASES",
  "RATE_LIMIT_LEASE_MS",
  "RATE_LIMIT_REDIS_CLUSTER",
  "RATE_LIMIT_REGIONS",
  "RATE_LIMIT_REGION",
  "ORIGIN_TIMEOUT_MS",
  "RATE_LIMIT_PREFIX",
  "RATE_LIMIT_DASHBOARD_HINTS",
  "RATE_LIMIT_ADMIN_TOKEN",
  "RATE_LIMIT_METRICS_TOKEN",
  "RATE_LIMIT_CLIENT_IP_HEADER",
  "RATE_LIMIT_JWT_SECRET",
  "RATE_LIMIT_JWKS_URL",
  "RATE_LIMIT_JWT_AUDIENCE",
  "RATE_LIMIT_JWT_ISSUER",
];

/** The bindings that are secrets (README "Configuration"): set with `wrangler secret put`, never in wrangler.toml. */
export const SECRETS = [
  "UPSTASH_REDIS_REST_TOKEN",
  "RATE_LIMIT_ADMIN_TOKEN",
  "RATE_LIMIT_METRICS_TOKEN",
  "RATE_LIMIT_JWT_SECRET",
];

/** A regional database's bindings (docs/regions.md): `UPSTASH_REDIS_REST_URL_<NAME>`, `UPSTASH_REDIS_REST_TOKEN_<NAME>`. */
export const REGION_BINDING = /^UPSTASH_REDIS_REST_(URL|TOKEN)_[A-Z][A-Z0-9_]*$/;

/** Every binding name Floodgate reads among `names`: those above and any region's. */
export const bindingsAmong = (/** @type {Iterable<string>} */ names) => [
  ...new Set([...BINDINGS, ...[...names].filter((name) => REGION_BINDING.test(name))]),
];
