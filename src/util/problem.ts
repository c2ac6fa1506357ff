/**
 * The one error type family of every request-time outcome (misconfiguration is a plain `Error`,
 * src/config/errors.ts): a `ProblemError` is a Hono `HTTPException` with an RFC 9457 problem type, title
 * and detail. `getResponse()` is its
 * `application/problem+json` answer, so an app without an `onError` still answers problem+json, and an
 * app's own `onError` can restyle any of them (`err instanceof HTTPException`, `err.status`).
 */
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";

/** A request-time outcome with its problem type, title and status. */
export class ProblemError extends HTTPException {
  override readonly status: ContentfulStatusCode;

  constructor(
    status: ContentfulStatusCode,
    readonly type: string,
    readonly title: string,
    readonly detail: string,
    /** Extra response headers (RateLimit, Retry-After, WWW-Authenticate). */
    readonly headers: Record<string, string> = {},
    /** Extension members of the body (`violated-policies`, `retry_after`). */
    readonly extensions: Record<string, unknown> = {},
  ) {
    super(status, { message: detail });
    this.status = status;
  }

  /** The problem+json response of this outcome. */
  override getResponse(): Response {
    return problemResponse(this);
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
