/**
 * Settling a request's cost from its response (a rule's `settle`, docs/settle.md). At admission the request was
 * charged its `cost` (the reservation); once the response has said what it really cost (its headers for
 * `header:`, its body's end for `json:` and `sse:`), the difference is charged or given back in the background
 * (`waitUntil`), in one script call. The body streams to the client unchanged, chunk by chunk, never buffered
 * (src/middleware/settle-scan.ts reads it as it passes). A response that does not say keeps the reservation,
 * and one line is logged.
 */
import type { SettleSource } from "../config";
import type { Decider, Decision, RuleResult, Settlement, WaitUntil } from "../engine/types";
import { type ScanResult, type Scanner, scannerOf, unitsOf } from "./settle-scan";
import type { SettledRule, SettleReport } from "./settled";

/** A rule of the decision whose cost settles from the response. */
export interface Pending {
  result: RuleResult;
  source: SettleSource;
}

/** What a settlement needs beside the response. */
export interface SettleContext {
  decider: Decider;
  requestId: string;
  /** `Date.now()` before the decision was sent. */
  decidedAtMs: number;
  waitUntil: WaitUntil;
  /** Where the one line about a response that did not say, a failed settlement or a monitor rule's debt goes. */
  log: (line: string) => void;
  /** Told what each rule was settled to, once Redis has answered (or what stood, and why). */
  report?: SettleReport;
  /**
   * Called once when a body that passes through a scanner has been written to its end, failed, or been left by
   * the client (the hand-off gives concurrency slots back then: src/middleware/release.ts's pipe cannot take
   * workerd's native pipe as its source).
   */
  written?: () => void;
}

/** What `settleFrom` answers with; `passed`: its body passes through a scanner, and `written` will be called. */
export interface Settling {
  response: Response;
  passed: boolean;
}

/** Most bytes one read takes from the origin's body: fewer, larger reads than its own chunking. */
const READ_BYTES = 64 * 1024;

/** A byte pipe: workerd's IdentityTransformStream. */
type BytePipe = { readable: ReadableStream<Uint8Array>; writable: WritableStream<Uint8Array> };

/**
 * On workerd, its native byte pipe: the client's response is pumped from it natively, and a chunk written into
 * it from JavaScript costs less than one pulled from a JavaScript `ReadableStream` (docs/settle.md, "What it
 * costs"). Elsewhere (the npm middleware on Node or Bun) absent: a JavaScript stream passes the body on.
 */
const NativePipe = (globalThis as { IdentityTransformStream?: new () => BytePipe }).IdentityTransformStream;

/** The largest cost a response may state (a rule's largest `cost`). */
const MAX_UNITS = 1_000_000_000;

/**
 * The rules of `decision` that settle: allowed and counted by Redis (a degraded answer counted nothing that a
 * settlement could correct), and `counted` (a rule that also counts by status: only a response whose status it
 * counts), each with its source; `undefined` when there are none (the common case).
 */
export function settlingOf(
  decision: Decision,
  sources: ReadonlyMap<string, SettleSource>,
  counted: (rule: string) => boolean = () => true,
): Pending[] | undefined {
  let pending: Pending[] | undefined;
  for (const result of decision.results) {
    const source = sources.get(result.call.rule);
    if (source === undefined || result.outcome !== "allowed" || result.source !== "redis") continue;
    if (!counted(result.call.rule)) continue; // counts by status, and not this one: its units went back
    pending ??= [];
    pending.push({ result, source });
  }
  return pending;
}

/**
 * `response` (or a copy whose body passes through a scanner) that settles `pending` once its cost is known.
 * `failed`: the handler threw (the proxy's 502/504): there is no cost to read, the reservations stand.
 */
export function settleFrom(
  response: Response,
  pending: readonly Pending[],
  ctx: SettleContext,
  failed: boolean,
): Settling {
  const found = new Map<string, ScanResult>();
  const scanners = new Map<string, Scanner>();
  for (const { source } of pending) {
    if (found.has(source.text) || scanners.has(source.text)) continue;
    if (failed) found.set(source.text, { missing: `the request failed (${response.status})` });
    else if (source.kind === "header") {
      const value = response.headers.get(source.name);
      const units = value === null ? undefined : unitsOf(value, MAX_UNITS);
      found.set(source.text, units ?? { missing: "no such header" });
    } else if (response.body === null) found.set(source.text, { missing: "the response has no body" });
    else scanners.set(source.text, scannerOf(source));
  }
  const settle = () => settleNow(pending, found, ctx, response.status);
  if (scanners.size === 0 || response.body === null) {
    ctx.waitUntil(settle());
    return { response, passed: false };
  }
  let ended: () => void = () => undefined;
  const end = new Promise<void>((resolve) => {
    ended = resolve;
  });
  ctx.waitUntil(end.then(settle));
  const body = scanned(
    response.body,
    [...scanners.values()],
    (complete) => {
      for (const [text, scanner] of scanners) {
        found.set(text, complete ? scanner.end() : { missing: "the body did not finish" });
      }
      ended();
      ctx.written?.();
    },
    ctx.waitUntil,
  );
  return { response: new Response(body, response), passed: true };
}

/**
 * `body` passed through chunk by chunk, each chunk shown to every scanner first; `done` is called once: `true`
 * at its end, `false` if it failed or the client went away.
 */
function scanned(
  body: ReadableStream<Uint8Array>,
  scanners: readonly Scanner[],
  done: (complete: boolean) => void,
  waitUntil: WaitUntil,
): ReadableStream<Uint8Array> {
  let finished = false;
  const finish = (complete: boolean) => {
    if (finished) return;
    finished = true;
    done(complete);
  };
  const byob = NativePipe ? byobReaderOf(body) : undefined;
  if (NativePipe && byob) return pumped(byob, new NativePipe(), scanners, finish, waitUntil);
  return pulled(readerOf(body), scanners, finish);
}

/**
 * On workerd: the body read into two buffers in turn and written into a native pipe the client's response is
 * pumped from, one chunk read while the one before is being written (no other read ahead, nothing held back;
 * memory: the two buffers). A write completes once the client's side has taken the chunk, so a buffer is read
 * into again only after that.
 */
function pumped(
  reader: ReadableStreamBYOBReader,
  pipe: BytePipe,
  scanners: readonly Scanner[],
  finish: (complete: boolean) => void,
  waitUntil: WaitUntil,
): ReadableStream<Uint8Array> {
  const writer = pipe.writable.getWriter();
  const pump = async () => {
    // Two buffers in turn: the next chunk is read into one while the chunk in the other is being written.
    let next = new Uint8Array(READ_BYTES);
    let other = new Uint8Array(READ_BYTES);
    let writing: Promise<void> | undefined;
    try {
      for (;;) {
        const { done, value } = await reader.read(next);
        if (done || value === undefined) break;
        for (const scanner of scanners) scanner.chunk(value);
        if (writing) await writing; // the chunk before, in `other`, taken by the client: that buffer is free
        writing = writer.write(value);
        // Awaited above or below; meanwhile a client gone away must not leave a rejection unhandled.
        writing.catch(() => undefined);
        next = other;
        other = new Uint8Array(value.buffer as ArrayBuffer, 0, READ_BYTES);
      }
      if (writing) await writing;
      await writer.close();
      finish(true);
    } catch (error) {
      // The origin's body failed (the client's response fails too), or the client went away (the origin's body
      // is cancelled).
      finish(false);
      await Promise.allSettled([reader.cancel(error), writer.abort(error)]);
    }
  };
  waitUntil(pump());
  return pipe.readable;
}

/**
 * Elsewhere: a JavaScript stream that reads a chunk when the client's side asks for one (no read ahead:
 * `highWaterMark` 0), shown to every scanner first.
 */
function pulled(
  reader: ReturnType<typeof readerOf>,
  scanners: readonly Scanner[],
  finish: (complete: boolean) => void,
): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let chunk: Awaited<ReturnType<typeof reader.read>>;
        try {
          chunk = await reader.read();
        } catch (error) {
          finish(false);
          controller.error(error);
          return;
        }
        if (chunk.done || chunk.value === undefined) {
          controller.close();
          finish(true);
          return;
        }
        const bytes = chunk.value;
        // Scanned before it is passed on: enqueuing may hand its buffer over (detached here).
        for (const scanner of scanners) scanner.chunk(bytes);
        controller.enqueue(bytes);
      },
      cancel(reason) {
        finish(false);
        return reader.cancel(reason).catch(() => undefined);
      },
    },
    { highWaterMark: 0 },
  );
}

/** A BYOB reader of `body`, or `undefined` when it is not a byte stream (a handler's JS `ReadableStream`). */
function byobReaderOf(body: ReadableStream<Uint8Array>): ReadableStreamBYOBReader | undefined {
  try {
    return body.getReader({ mode: "byob" });
  } catch {
    return undefined;
  }
}

/**
 * A reader of `body` in reads of up to `READ_BYTES` (BYOB: one JS hop per read, where the origin's own chunking
 * may be a few KiB), or of its own chunks when it is not a byte stream.
 */
function readerOf(body: ReadableStream<Uint8Array>): {
  read(): Promise<{ done: boolean; value?: Uint8Array | undefined }>;
  cancel(reason: unknown): Promise<void>;
} {
  const byob = byobReaderOf(body);
  if (byob) {
    return {
      read: () => byob.read(new Uint8Array(READ_BYTES)),
      cancel: (reason) => byob.cancel(reason),
    };
  }
  const reader = body.getReader();
  return { read: () => reader.read(), cancel: (reason) => reader.cancel(reason) };
}

/** The settlements `found` calls for, sent in one call; what could not be settled, logged in one line. */
async function settleNow(
  pending: readonly Pending[],
  found: ReadonlyMap<string, ScanResult>,
  ctx: SettleContext,
  status: number,
): Promise<void> {
  const settlements: Settlement[] = [];
  const unsaid: string[] = [];
  // Each rule's report, in `pending`'s order; a settlement's filled in once Redis has answered.
  const rules: SettledRule[] = [];
  const settling: SettledRule[] = [];
  for (const { result, source } of pending) {
    const scan = found.get(source.text) ?? { missing: "not read" };
    const reserved = result.call.cost;
    if ("missing" in scan) {
      unsaid.push(`rule "${result.call.rule}" (${source.text}): ${scan.missing}`);
      rules.push({ result, outcome: "kept", reserved, applied: 0 });
      continue;
    }
    const rule: SettledRule = { result, outcome: "settled", reserved, applied: 0, cost: scan.units };
    rules.push(rule);
    const units = scan.units - reserved;
    if (units !== 0) {
      settlements.push({ result, units });
      settling.push(rule);
    }
  }
  if (unsaid.length > 0) {
    ctx.log(`floodgate: the response did not say its cost, the reservation stands: ${unsaid.join("; ")}`);
  }
  const startedAt = Date.now();
  const told = () => ctx.report?.({ status, rules, durationMs: Date.now() - startedAt });
  if (settlements.length === 0 || !ctx.decider.settle) {
    for (const rule of settling) Object.assign(rule, { outcome: "failed" });
    told();
    return;
  }
  try {
    const settled = await ctx.decider.settle(settlements, ctx.requestId, ctx.decidedAtMs);
    settling.forEach((rule, i) => {
      const done = settled[i];
      rule.applied = done?.applied ?? 0;
      if (done?.remaining !== undefined) rule.remaining = done.remaining;
    });
    // A monitor rule never denies: the debt a settlement left is its only sign (an `on` rule's shows in its
    // next decisions, denied until repaid).
    const owing = settlements
      .map(({ result }, i) => ({ result, remaining: settled[i]?.remaining }))
      .filter(({ result, remaining }) => result.call.mode === "monitor" && (remaining ?? 0) < 0);
    if (owing.length > 0) {
      const which = owing.map(
        ({ result, remaining }) => `rule "${result.call.rule}" owes ${-(remaining ?? 0)}`,
      );
      ctx.log(
        `floodgate: monitor: a settlement went past the limit, would deny until repaid: ${which.join("; ")}`,
      );
    }
  } catch {
    for (const rule of settling) rule.outcome = "failed";
    const names = settlements.map(({ result }) => `"${result.call.rule}"`).join(", ");
    ctx.log(
      `floodgate: could not settle the cost of rule ${names} (Redis did not answer); the reservation stands`,
    );
  }
  told();
}
