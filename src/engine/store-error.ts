/**
 * What the store throws when Redis cannot decide: one small typed error, its `kind` what the resilience layer
 * acts on (src/resilience/failure.ts), and the one mapping from whatever the REST client threw to it.
 */

/** Why Redis could not decide. */
export type StoreErrorKind = "timeout" | "unavailable" | "auth" | "script";

/** Redis could not decide. Its message may quote the command (identity hashes): log `kind`, not the message. */
export class StoreError extends Error {
  constructor(
    readonly kind: StoreErrorKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "StoreError";
  }
}

// Redis errors meaning "cannot answer right now" (docs/failure-modes.md: the rule's `failure` applies),
// as opposed to a broken script.
const UNAVAILABLE = /^(BUSY|LOADING|READONLY|OOM|MASTERDOWN|TRYAGAIN|CLUSTERDOWN)\b/;
// What a REST 401 (or SRH's 400 for a malformed header) says; the SDK hides the status code.
const AUTH = /WRONGPASS|NOAUTH|unauthori[sz]ed|invalid token|authorization header/i;
const REDIS_ERROR = /^(ERR|WRONGTYPE|NOSCRIPT)\b/;

/** Maps anything the client threw to a {@link StoreError}. */
export function toStoreError(error: unknown): StoreError {
  if (error instanceof StoreError) return error;
  const name = (error as { name?: unknown } | null)?.name;
  const message = error instanceof Error ? error.message : String(error);
  if (name === "TimeoutError" || name === "AbortError") {
    return new StoreError("timeout", "the Redis decision exceeded its budget", { cause: error });
  }
  const status = (error as { status?: unknown } | null)?.status;
  // A REST 5xx (the endpoint could not reach Redis) reads "ERR …" but is no script error.
  if (typeof status === "number" && status >= 500) {
    return new StoreError("unavailable", message, { cause: error });
  }
  if (name === "UpstashError") {
    if (AUTH.test(message))
      return new StoreError("auth", "the Redis REST endpoint rejected the token", { cause: error });
    if (UNAVAILABLE.test(message)) return new StoreError("unavailable", message, { cause: error });
    if (REDIS_ERROR.test(message)) return new StoreError("script", message, { cause: error });
  }
  // Network errors, unparseable (proxy/5xx) bodies, anything else: Redis did not answer.
  return new StoreError("unavailable", message, { cause: error });
}
