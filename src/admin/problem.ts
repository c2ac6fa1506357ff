/**
 * The admin API's problem+json answers (RFC 9457). Every admin error goes through `adminProblem`, so the
 * shape is the same for 401, 404, 400 and 503, and no secret or raw identity ever reaches a body.
 */

/** An admin request that cannot be served; `onError` of the admin app turns it into problem+json. */
export class AdminError extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 503,
    readonly title: string,
    readonly detail: string,
  ) {
    super(detail);
    this.name = "AdminError";
  }
}

/** The problem+json response for an admin error. */
export function adminProblem(error: AdminError): Response {
  const headers: Record<string, string> = {
    "Content-Type": "application/problem+json",
    "Cache-Control": "no-store",
  };
  if (error.status === 401) headers["WWW-Authenticate"] = 'Bearer realm="floodgate-admin"';
  return new Response(
    JSON.stringify({ type: "about:blank", title: error.title, status: error.status, detail: error.detail }),
    { status: error.status, headers },
  );
}

/** 404 for an admin path or a rule that does not exist. */
export const notFound = (detail: string): AdminError => new AdminError(404, "Not Found", detail);

/** 400 for a request the admin API cannot understand. */
export const badRequest = (detail: string): AdminError => new AdminError(400, "Bad Request", detail);
