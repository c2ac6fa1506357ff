/**
 * What went wrong when Redis could not decide, in the words the rest of Floodgate uses
 * (`DegradedReason`), and the one-time log line for rejected credentials.
 */
import type { StoreErrorKind } from "../engine/store";
import type { DegradedReason } from "../engine/types";

/** A decision that did not come back from Redis, reduced to what may be shown and logged. */
export interface DecisionFailure {
  kind: StoreErrorKind;
  reason: DegradedReason;
}

/**
 * Classifies anything the store threw. Only `kind` is read, never the message: an error text may quote
 * the command (identity hashes) and must not reach a response. Anything without a known kind (a bug,
 * a malformed reply) is treated as `unavailable`, so it still follows the failure policy.
 */
export function classifyFailure(error: unknown): DecisionFailure {
  const kind = (error as { kind?: unknown } | null)?.kind;
  switch (kind) {
    case "timeout":
      return { kind, reason: "timeout" };
    case "auth":
      return { kind, reason: "auth" };
    case "script":
      return { kind, reason: "redis_error" };
    default:
      return { kind: "unavailable", reason: "redis_error" };
  }
}

/**
 * A setting as a log line names it: the same decider serves the Worker (a binding) and `rateLimit()` (an
 * option), and the reader may run either.
 */
const setting = (binding: string, option: string) => `${binding} (Worker) / ${option} (middleware)`;
const REST_URL = setting("UPSTASH_REDIS_REST_URL", "redis.url");
const REST_TOKEN = setting("UPSTASH_REDIS_REST_TOKEN", "redis.token");

/** The log line for a REST 401: names the settings to check, never their values. */
export const AUTH_LOG_LINE =
  `floodgate: the Redis REST endpoint rejected our credentials (HTTP 401): check ${REST_TOKEN} ` +
  `(and that ${REST_URL} is the database it belongs to); every rule follows its failure policy ` +
  "until Redis accepts them";

/** How a failure kind reads in a log line: what happened and which setting to check. Never a value. */
export const FAILURE_TEXT: Readonly<Record<StoreErrorKind, string>> = {
  timeout: `no answer within ${setting("RATE_LIMIT_TIMEOUT_MS", "timeoutMs")}`,
  unavailable:
    "Redis or its REST endpoint could not be reached or answered with an error; if this persists, " +
    `check ${REST_URL}`,
  auth: `credentials rejected; check ${REST_TOKEN}`,
  script: "Redis refused the decision script",
};
