/**
 * The limiter's answer on the handler's response: the rate-limit headers and `Server-Timing` added to it
 * (`withHeaders`), and the result made the context's response as it is (`replaceResponse`).
 */
import type { Context } from "hono";

/**
 * Makes `response` the answer. Hono's `c.res` setter copies a new response and writes every header of the old
 * one over it (a fetched response's own `RateLimit` or `Server-Timing` would replace ours): cleared first,
 * it takes the object as it is.
 */
export function replaceResponse(c: Context, response: Response): void {
  c.res = undefined;
  c.res = response;
}

/**
 * `response` with the rate-limit headers and `Server-Timing` added: in place when its headers can be
 * changed (the proxy's and most handlers' can), else on a copy (a fetched response's are immutable; the
 * body is not copied). A refused `set` throws before changing anything.
 */
export function withHeaders(response: Response, headers: Record<string, string>, timing: string): Response {
  try {
    return addHeaders(response, headers, timing);
  } catch (error) {
    if (!(error instanceof TypeError)) throw error;
    return addHeaders(new Response(response.body, response), headers, timing);
  }
}

function addHeaders(target: Response, headers: Record<string, string>, timing: string): Response {
  const fields = target.headers; // a getter into the runtime: read once
  for (const name in headers) fields.set(name, headers[name] as string);
  fields.append("Server-Timing", timing);
  return target;
}
