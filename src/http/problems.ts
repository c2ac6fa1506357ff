/**
 * The one `onError` funnel and the proxy's own outcomes (502, 504) and the 500 of an invalid
 * configuration. Every outcome is a `ProblemError` (src/util/problem.ts); the limiter's 400/401/429/503
 * live beside the middleware that raises them (src/middleware/errors.ts), the admin API's 400/401/404 in
 * src/admin/problem.ts. Nothing unexpected reaches the wire: no stack, no secret.
 */
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import { ConfigError } from "../config/errors";
import { ProblemError, problemResponse } from "../util/problem";

export { ProblemError, problemResponse } from "../util/problem";

/** 502: the origin could not be reached (DNS, refused connection, TLS, reset). */
export class OriginUnreachableError extends ProblemError {
  override readonly name = "OriginUnreachableError";
  constructor() {
    super(502, "about:blank", "Bad Gateway", "The origin could not be reached.");
  }
}

/** 502: the origin answered with a status HTTP does not define (outside 200–599): no response can carry it on. */
export class OriginInvalidStatusError extends ProblemError {
  override readonly name = "OriginInvalidStatusError";
  constructor(status: number) {
    super(
      502,
      "about:blank",
      "Bad Gateway",
      `The origin answered with status ${status}, which HTTP does not define.`,
    );
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

/** The one `onError` funnel: named outcomes → their problem; anything else → a generic 500 and a log line. */
export function onError(error: unknown, _c?: Context): Response {
  if (error instanceof ProblemError) return problemResponse(error);
  if (error instanceof ConfigError) return problemResponse(new MisconfiguredError(error));
  if (error instanceof HTTPException) {
    if (error.res) return error.getResponse(); // a response the thrower chose
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
