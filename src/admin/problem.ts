/**
 * The admin API's outcomes (400, 401, 403, 404, 503): `ProblemError`s like every other (src/util/problem.ts),
 * answered by the one `onError` (src/http/problems.ts), so their shape is the one of every problem+json
 * Floodgate sends, and no secret or raw identity ever reaches a body.
 */
import { ProblemError } from "../util/problem";

/** Longest detail an admin problem carries: one that quotes a request's own input (a rule name, a body value) is cut. */
const MAX_DETAIL = 300;

/** An admin request that cannot be served. */
export class AdminError extends ProblemError {
  override readonly name = "AdminError";
  constructor(
    status: 400 | 401 | 403 | 404 | 413 | 429 | 503,
    title: string,
    detail: string,
    extraHeaders: Record<string, string> = {},
  ) {
    const headers: Record<string, string> =
      status === 401
        ? { "WWW-Authenticate": 'Bearer realm="floodgate-admin"', ...extraHeaders }
        : extraHeaders;
    const cut = detail.length > MAX_DETAIL ? `${detail.slice(0, MAX_DETAIL - 1)}…` : detail;
    super(status, "about:blank", title, cut, headers);
  }
}

/**
 * 401 for an admin token or a session cookie that was presented and is wrong: a guess, which the throttle
 * counts (throttle.ts). A request that presents nothing gets a plain `AdminError` 401.
 */
export class WrongCredentialsError extends AdminError {
  constructor(detail: string) {
    super(401, "Unauthorized", detail);
  }
}

/** 404 for an admin path or a rule that does not exist. */
export const notFound = (detail: string): AdminError => new AdminError(404, "Not Found", detail);

/** 400 for a request the admin API cannot understand. */
export const badRequest = (detail: string): AdminError => new AdminError(400, "Bad Request", detail);
