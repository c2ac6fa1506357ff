/**
 * The Worker's bindings (README: "Configuration"). `[vars]` arrive as strings, numbers or (for `RATE_LIMIT_RULES`)
 * TOML tables; secrets and `.dev.vars` always as strings. Everything is validated once per isolate by
 * `parseEnv` in `src/config`, so this type is deliberately loose.
 */

export interface Env {
  /** Where allowed requests go: scheme + host [+ port] [+ base path]. */
  ORIGIN_URL?: string;
  /** The Upstash (or local Upstash-compatible) REST endpoint; several comma-separated (docs/scaling-out.md). */
  UPSTASH_REDIS_REST_URL?: string;
  /** Secret: the REST token; with several endpoints, one for all or one per URL in the same order. */
  UPSTASH_REDIS_REST_TOKEN?: string;
  /** The rules: a TOML array of tables in `[vars]`, or the same as a JSON string. */
  RATE_LIMIT_RULES?: unknown;
  /** `on` | `off` | `monitor`. @default "on" */
  RATE_LIMIT_MODE?: string;
  /** `open` | `closed`. @default "open" */
  RATE_LIMIT_FAILURE?: string;
  /** Budget for one request's Redis wait, in ms. @default 200 */
  RATE_LIMIT_TIMEOUT_MS?: string | number;
  /** `on` | `off`: hot identities decided from leases (docs/leases.md). @default "on" */
  RATE_LIMIT_LEASES?: string;
  /** The longest life of a lease, in ms. @default 1000 */
  RATE_LIMIT_LEASE_MS?: string | number;
  /** `on` | `off`: the Redis endpoints are Redis Clusters (docs/scaling-out.md). @default "off" */
  RATE_LIMIT_REDIS_CLUSTER?: string;
  /** `on` | `off`: a masked hint beside each identity the dashboard lists (docs/operating.md). @default "off" */
  RATE_LIMIT_DASHBOARD_HINTS?: string;
  /** How long to wait for the origin's response headers, in ms. @default 30000 */
  ORIGIN_TIMEOUT_MS?: string | number;
  /** Prefix of every Redis key. @default "rl" */
  RATE_LIMIT_PREFIX?: string;
  /** Secret: enables the admin API at `/__floodgate`. */
  RATE_LIMIT_ADMIN_TOKEN?: string;
  /** Secret (≥ 16 characters): opens `GET /__floodgate/metrics` and nothing else (docs/monitoring.md). */
  RATE_LIMIT_METRICS_TOKEN?: string;
  /** The one header trusted for the client IP. @default "CF-Connecting-IP" */
  RATE_LIMIT_CLIENT_IP_HEADER?: string;
  /** Secret: HS256/384/512 key for `jwt:<claim>` keys. */
  RATE_LIMIT_JWT_SECRET?: string;
  /** JWKS URL for `jwt:<claim>` keys signed with RS*, ES* or EdDSA. */
  RATE_LIMIT_JWKS_URL?: string;
  /** The `aud` a JWT must carry for its claims to count: one value, or several comma-separated. @default any */
  RATE_LIMIT_JWT_AUDIENCE?: string | string[];
  /** The `iss` a JWT must carry for its claims to count: one value, or several comma-separated. @default any */
  RATE_LIMIT_JWT_ISSUER?: string | string[];
  /**
   * Regional databases: region names to the continents or colos they serve, e.g. `{ eu = ["EU", "AF"] }` (a
   * TOML table, or the same as a JSON string); each region's database is `UPSTASH_REDIS_REST_URL_<NAME>` /
   * `UPSTASH_REDIS_REST_TOKEN_<NAME>` (docs/regions.md).
   */
  RATE_LIMIT_REGIONS?: unknown;
  /** Pins the Worker to one region of `RATE_LIMIT_REGIONS` (otherwise chosen from `request.cf`). */
  RATE_LIMIT_REGION?: string;
  /** A region's REST URL (`<NAME>`: the region's name upper-cased). */
  [regionUrl: `UPSTASH_REDIS_REST_URL_${string}`]: string | undefined;
  /** Secret: a region's REST token. */
  [regionToken: `UPSTASH_REDIS_REST_TOKEN_${string}`]: string | undefined;
  /** Optional Analytics Engine dataset: one data point per decision (src/observability). */
  RATE_LIMIT_ANALYTICS?: {
    writeDataPoint(point: { indexes: string[]; blobs: string[]; doubles: number[] }): void;
  };
}
