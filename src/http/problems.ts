/**
 * Every error response is built here (STYLE §8): request-time outcomes are small named classes with a
 * `status`; `problemResponse` turns one into `application/problem+json` (RFC 9457) and `onError` is the
 * one funnel for anything thrown. Types are the IANA ones of the RateLimit draft for 429/503 and
 * `about:blank` (title = the status phrase) otherwise. Nothing unexpected reaches the wire: no stack, no secret.
 */
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import { ConfigError } from "../config/errors";

const IANA = "https://iana.org/assignments/http-problem-types";

/** A request-time outcome with its problem type, title and status. */
export class ProblemError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    readonly title: string,
    readonly detail: string,
    /** Extra response headers (RateLimit, Retry-After, WWW-Authenticate). */
    readonly headers: Record<string, string> = {},
    /** Extension members of the body (`violated-policies`, `retry_after`). */
    readonly extensions: Record<string, unknown> = {},
  ) {
    super(detail);
  }
}

/** 400: the request's cost (e.g. a `cost = "header:x-rows"` value) is not a positive integer ≤ 1e9. */
export class InvalidCostError extends ProblemError {
  override readonly name = "InvalidCostError";
  constructor(rule: string, source: string, value: unknown) {
    super(
      400,
      "about:blank",
      "Bad Request",
      `Rule "${rule}": the cost from ${source} must be a whole number from 1 to 1000000000, got ${JSON.stringify(String(value)).slice(0, 40)}.`,
    );
  }
}

/** 401: a rule with `missing = "deny"` found no value for its key (no header, no valid JWT, ...). */
export class MissingIdentityError extends ProblemError {
  override readonly name = "MissingIdentityError";
  constructor(rule: string, keyText: string) {
    const headers: Record<string, string> = keyText.includes("jwt:")
      ? { "WWW-Authenticate": 'Bearer realm="floodgate"' }
      : {};
    super(
      401,
      "about:blank",
      "Unauthorized",
      `Rule "${rule}" needs ${keyText} and the request has none (or it is not valid).`,
      headers,
      { key: keyText },
    );
  }
}

/** 429: one or more `on` rules deny the request (CONTRACT §4). */
export class QuotaExceededError extends ProblemError {
  override readonly name = "QuotaExceededError";
  constructor(
    violated: readonly string[],
    policy: string,
    retryAfterSeconds: number,
    headers: Record<string, string>,
  ) {
    super(
      429,
      `${IANA}#quota-exceeded`,
      "Too Many Requests",
      `Rate limit "${policy}" exceeded; retry in ${retryAfterSeconds} second${retryAfterSeconds === 1 ? "" : "s"}.`,
      { ...headers, "Retry-After": String(retryAfterSeconds) },
      { "violated-policies": violated, policy, retry_after: retryAfterSeconds },
    );
  }
}

/** 503: Redis could not decide and a matched `on` rule fails closed (CONTRACT §9). */
export class ReducedCapacityError extends ProblemError {
  override readonly name = "ReducedCapacityError";
  constructor(rules: readonly string[], retryAfterSeconds: number, reason: string) {
    super(
      503,
      `${IANA}#temporary-reduced-capacity`,
      "Service Unavailable",
      `The rate limiter cannot decide right now (${reason}) and ${rules.map((r) => `"${r}"`).join(", ")} fail${rules.length === 1 ? "s" : ""} closed; retry in ${retryAfterSeconds} s.`,
      { "Retry-After": String(retryAfterSeconds) },
      { "violated-policies": rules, retry_after: retryAfterSeconds },
    );
  }
}

/** 502: the origin could not be reached (DNS, refused connection, TLS, reset). */
export class OriginUnreachableError extends ProblemError {
  override readonly name = "OriginUnreachableError";
  constructor() {
    super(502, "about:blank", "Bad Gateway", "The origin could not be reached.");
  }
}

/** 504: the origin sent no response headers within `ORIGIN_TIMEOUT_MS`. */
export class OriginTimeoutError extends ProblemError {
  override readonly name = "OriginTimeoutError";
  constructor(timeoutMs: number) {
    super(504, "about:blank", "Gateway Timeout", `The origin did not respond within ${timeoutMs} ms.`);
  }
}

/** 500 for an invalid configuration: the detail names the binding and field, never a secret's value. */
export class MisconfiguredError extends ProblemError {
  override readonly name = "MisconfiguredError";
  constructor(error: ConfigError) {
    super(500, "about:blank", "Internal Server Error", `Invalid configuration: ${error.message}`);
  }
}

/** The problem+json response of one outcome. Error responses are never cached. */
export function problemResponse(problem: ProblemError): Response {
  const body = {
    type: problem.type,
    title: problem.title,
    status: problem.status,
    detail: problem.detail,
    ...problem.extensions,
  };
  return new Response(JSON.stringify(body), {
    status: problem.status,
    headers: { ...problem.headers, "Content-Type": "application/problem+json", "Cache-Control": "no-store" },
  });
}

/** The one `onError` funnel: named outcomes → their problem; anything else → a generic 500 and a log line. */
export function onError(error: unknown, _c?: Context): Response {
  if (error instanceof ProblemError) return problemResponse(error);
  if (error instanceof ConfigError) return problemResponse(new MisconfiguredError(error));
  if (error instanceof HTTPException) {
    return problemResponse(
      new ProblemError(
        error.status,
        "about:blank",
        error.message || "Error",
        error.message || "The request could not be handled.",
      ),
    );
  }
  // The message could quote a command or a value, so only the error's class is logged.
  console.error(JSON.stringify({ event: "unexpected_error", error: (error as Error)?.name ?? typeof error }));
  return problemResponse(
    new ProblemError(500, "about:blank", "Internal Server Error", "An unexpected error occurred."),
  );
}
