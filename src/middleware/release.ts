/**
 * When a `concurrency` or `shed` slot is given back (README: "Rules"): once the Worker has finished writing the
 * response body, or the client went away; at once for bodiless responses. (A WebSocket upgrade, whose
 * lifetime the Worker does not see, never gets here: src/middleware/limiter.ts gives its slot back at once.)
 * The release runs in the background (`waitUntil`), never before the client's response.
 */
import type { WaitUntil } from "../engine/types";

/**
 * Returns a response whose body, once fully written or cancelled, calls `release`.
 * `release` is called exactly once and its failure is swallowed (the lease frees the slot anyway).
 */
export function releaseWhenWritten(
  response: Response,
  release: () => Promise<void>,
  waitUntil: WaitUntil,
): Response {
  const safeRelease = () => release().catch(() => undefined);
  if (response.body === null) {
    waitUntil(safeRelease());
    return response;
  }
  const { readable, writable } = new TransformStream();
  // pipeTo settles when the last chunk is written (resolve) or the client cancels the body (reject).
  waitUntil(response.body.pipeTo(writable).then(safeRelease, safeRelease));
  return new Response(readable, response);
}
