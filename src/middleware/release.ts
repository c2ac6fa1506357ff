/**
 * Which `concurrency` or `shed` slots a request holds (`heldSlots`), and when each is given back (docs/configuration.md,
 * "Rules"): once the Worker has finished writing the response body, or the client went away; at once for
 * bodiless responses. (A WebSocket upgrade, whose lifetime the Worker does not see, never gets here:
 * src/middleware/hand-off.ts gives its slot back at once.)
 * The release runs in the background (`waitUntil`), never before the client's response.
 */
import { traitsOf } from "../engine/algorithms";
import type { Decision, RuleResult, WaitUntil } from "../engine/types";

/**
 * Returns a response whose body, once fully written, cancelled by the client or failed, calls `release`.
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
  const { body } = response;
  const { readable, writable } = bytePipe();
  // Copied chunk by chunk, not piped: workerd cannot pipe one of its native byte pipes into another (a handler's
  // IdentityTransformStream or FixedLengthStream body), and such a pipe neither fails nor settles, leaving the
  // client waiting. The copy settles when the last chunk is written, or the client cancels, or the body fails
  // mid-way: either way it is done with the body.
  waitUntil(copy(body, writable).then(safeRelease, safeRelease));
  return new Response(readable, response);
}

/** `body` written into `writable` one chunk at a time; a failure on either side ends both. */
async function copy(body: ReadableStream<Uint8Array>, writable: WritableStream<Uint8Array>): Promise<void> {
  const reader = body.getReader();
  const writer = writable.getWriter();
  try {
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      await writer.write(chunk.value);
    }
    await writer.close();
  } catch (error) {
    await Promise.all([
      writer.abort(error).catch(() => undefined),
      reader.cancel(error).catch(() => undefined),
    ]);
  }
}

/** A byte pipe: what a TransformStream of bytes and workerd's IdentityTransformStream both are. */
type BytePipe = { readable: ReadableStream<Uint8Array>; writable: WritableStream<Uint8Array> };

/**
 * On workerd, its native byte pipe: a body failing mid-way (an origin resetting its connection) then ends
 * the client's response with no unhandled rejection, where a JS `TransformStream` left two "Uncaught (in
 * promise)" errors per request in the log (test/node/release-worker.test.ts). Elsewhere (the npm middleware
 * on Node or Bun), a `TransformStream`. The copy into it costs a JS read and write per chunk: 18–20 ms of
 * workerd CPU per 10 MB against a native pipe's 7 (docs/benchmarks.md, "Settling a cost from the response").
 */
const NativePipe = (globalThis as { IdentityTransformStream?: new () => BytePipe }).IdentityTransformStream;

function bytePipe(): BytePipe {
  return NativePipe ? new NativePipe() : new TransformStream<Uint8Array, Uint8Array>();
}

const NO_SLOTS: readonly RuleResult[] = [];

/**
 * Concurrency slots this request holds (or may hold: a timed-out call may still have been counted), in Redis or
 * in the fallback limiter's count of requests in flight.
 */
export function heldSlots(decision: Decision): readonly RuleResult[] {
  // Most requests have no slot rule: no copy.
  if (!decision.results.some((r) => traitsOf(r.call.algorithm).holdsSlot)) return NO_SLOTS;
  return decision.results.filter(
    (r) =>
      traitsOf(r.call.algorithm).holdsSlot &&
      r.outcome === "allowed" &&
      (r.source === "redis" || r.source === "undecided" || r.source === "fallback"),
  );
}
