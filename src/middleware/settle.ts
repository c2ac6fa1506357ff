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
}

/** Most bytes one read takes from the origin's body: fewer, larger reads than its own chunking. */
const READ_BYTES = 64 * 1024;

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
): Response {
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
    return response;
  }
  let ended: () => void = () => undefined;
  const end = new Promise<void>((resolve) => {
    ended = resolve;
  });
  ctx.waitUntil(end.then(settle));
  const body = scanned(response.body, [...scanners.values()], (complete) => {
    for (const [text, scanner] of scanners) {
      found.set(text, complete ? scanner.end() : { missing: "the body did not finish" });
    }
    ended();
  });
  return new Response(body, response);
}

/**
 * `body` passed through chunk by chunk as the client reads it (no read ahead: `highWaterMark` 0), each chunk
 * shown to every scanner first; `done` is called once: `true` at its end, `false` if it failed or the client
 * went away.
 */
function scanned(
  body: ReadableStream<Uint8Array>,
  scanners: readonly Scanner[],
  done: (complete: boolean) => void,
): ReadableStream<Uint8Array> {
  const reader = readerOf(body);
  let finished = false;
  const finish = (complete: boolean) => {
    if (finished) return;
    finished = true;
    done(complete);
  };
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

/**
 * A reader of `body` in reads of up to `READ_BYTES` (BYOB: one JS hop per read, where the origin's own chunking
 * may be a few KiB), or of its own chunks when it is not a byte stream (a handler's JS `ReadableStream`).
 */
function readerOf(body: ReadableStream<Uint8Array>): {
  read(): Promise<{ done: boolean; value?: Uint8Array | undefined }>;
  cancel(reason: unknown): Promise<void>;
} {
  try {
    const byob = body.getReader({ mode: "byob" });
    return {
      read: () => byob.read(new Uint8Array(READ_BYTES)),
      cancel: (reason) => byob.cancel(reason),
    };
  } catch {
    const reader = body.getReader();
    return { read: () => reader.read(), cancel: (reason) => reader.cancel(reason) };
  }
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
