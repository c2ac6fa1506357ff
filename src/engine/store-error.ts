/**
 * What the Redis port throws when Redis cannot answer: one small typed error, its `kind` what the resilience
 * layer acts on (src/resilience/failure.ts). The kind is read from what the REST API says, never from an
 * error's wording: the HTTP status first, then the code a Redis error starts with (docs/redis-port.md).
 */

/** Why Redis could not answer. */
export type StoreErrorKind = "timeout" | "unavailable" | "auth" | "script";

/** Redis could not answer. Its message is Redis's own error text (it may name a key): log `kind`, not the message. */
export class StoreError extends Error {
  /** The Redis error's code (its first word: `NOSCRIPT`, `BUSY`, `WRONGTYPE` …) when Redis answered with one. */
  readonly code?: string;

  constructor(
    readonly kind: StoreErrorKind,
    message: string,
    options?: { cause?: unknown; code?: string },
  ) {
    super(message, options);
    this.name = "StoreError";
    if (options?.code !== undefined) this.code = options.code;
  }
}

/** The message of a call its budget cut short (a decision's `RATE_LIMIT_TIMEOUT_MS`, an admin command's timeout). */
const TIMED_OUT = "the Redis call exceeded its budget";

/**
 * Redis error codes and what they mean here. "Cannot answer right now" (docs/failure-modes.md:
 * the rule's `failure` applies) as opposed to a command or script Redis refused. A code not listed (a proxy's,
 * a newer Redis's) counts as `unavailable`, so it still follows the failure policy.
 */
const CODE_KIND: Readonly<Record<string, StoreErrorKind>> = {
  BUSY: "unavailable",
  LOADING: "unavailable",
  READONLY: "unavailable",
  OOM: "unavailable",
  MASTERDOWN: "unavailable",
  TRYAGAIN: "unavailable",
  CLUSTERDOWN: "unavailable",
  WRONGPASS: "auth",
  NOAUTH: "auth",
  ERR: "script",
  WRONGTYPE: "script",
  NOSCRIPT: "script",
};

/** The code a Redis error text starts with: its first word. */
function codeOf(error: string): string {
  const space = error.indexOf(" ");
  return space < 0 ? error : error.slice(0, space);
}

/**
 * A REST reply that carries `error` (a whole request's, or one command's inside a pipeline or transaction),
 * answered with HTTP `status`.
 */
export function restError(status: number, error: string): StoreError {
  const code = codeOf(error);
  // Upstash answers a missing or wrong token with 401, whatever its text says.
  if (status === 401) return new StoreError("auth", "the Redis REST endpoint rejected the token", { code });
  // A 5xx: the endpoint could not reach Redis. It may read "ERR …", yet it is no refused command.
  if (status >= 500) return new StoreError("unavailable", error, { code });
  return new StoreError(CODE_KIND[code] ?? "unavailable", error, { code });
}

/** A REST reply that is not what the API answers (no JSON, no result): a proxy's error page, say. */
export const malformedReply = (status: number): StoreError =>
  new StoreError("unavailable", `the Redis REST endpoint answered HTTP ${status} without a REST reply`);

/** A call its budget cut short before it was sent (a NOSCRIPT reload with no time left). */
export const timedOut = (): StoreError => new StoreError("timeout", TIMED_OUT);

/** A `fetch` that threw: aborted by the budget (`timeout`), or no answer at all (`unavailable`). */
export function requestFailure(error: unknown): StoreError {
  const name = (error as { name?: unknown } | null)?.name;
  if (name === "TimeoutError" || name === "AbortError") {
    return new StoreError("timeout", TIMED_OUT, { cause: error });
  }
  const message = error instanceof Error ? error.message : String(error);
  return new StoreError("unavailable", `the Redis REST endpoint could not be reached: ${message}`, {
    cause: error,
  });
}
