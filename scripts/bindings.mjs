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
  "ORIGIN_TIMEOUT_MS",
  "RATE_LIMIT_PREFIX",
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
