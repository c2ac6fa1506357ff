/**
 * What an admitted request leaves behind once its response is known: units held for a status a rule does not
 * count go back (docs/counting.md), a cost that settles from the response is charged or given back as it ends
 * (docs/settle.md), and held concurrency slots go back once the body is written (./release.ts). Or, for a
 * client that went away before its delayed slot, everything goes back at once.
 */
import type { Context } from "hono";
import type { Decider, Decision, WaitUntil } from "../engine/types";
import type { RequestFacts } from "../identity";
import { giveBackUncounted, heldUntilStatus } from "./count";
import { type Decided, NO_REQUEST_ID } from "./decide";
import { giveBack } from "./delay";
import type { Prepared } from "./limiter-deps";
import { heldSlots, releaseWhenWritten } from "./release";
import { replaceResponse, withHeaders } from "./respond";
import { settleFrom, settlingOf } from "./settle";
import { settleReport } from "./settled";

/** An allowed request's decision, with what it needs after the response. */
export interface Admitted extends Decided {
  request: RequestFacts;
  /** Gives back the request's concurrency slots; absent when it holds none. */
  releaseSlots: (() => Promise<void>) | undefined;
  waitUntil: WaitUntil;
}

/** What gives back `decision`'s concurrency slots, or `undefined` when it holds none. */
export function slotReleaser(
  decider: Decider,
  decision: Decision,
  requestId: string,
): (() => Promise<void>) | undefined {
  const slots = heldSlots(decision);
  return slots.length === 0
    ? undefined
    : () => Promise.all(slots.map((r) => decider.release(r.call, requestId))).then(() => undefined);
}

/** The client went away before its delayed slot: no one to answer (499), and its slots go back where they can. */
export function leftBeforeSlot(p: Prepared, c: Context, a: Admitted): Response {
  const { decider, onSettle } = p.deps;
  const { decision, requestId, decidedAtMs, request, releaseSlots, waitUntil } = a;
  waitUntil(giveBack(decider, decision, requestId).catch(() => undefined));
  if (releaseSlots) waitUntil(releaseSlots().catch(() => undefined));
  // Nothing reached the origin: a rule counting by status gets its units back (a delayed rule's went back
  // with its slot just above).
  const held = heldUntilStatus(decision, p.statusCounts).filter((r) => !r.delayMs);
  const told = settleReport(onSettle, c.req.raw, () => request.id());
  giveBackUncounted(decider, held, p.statusCounts, 499, requestId, decidedAtMs, waitUntil, told);
  return new Response(null, { status: 499 });
}

/**
 * After the handler: the response's status decides what counted, the rate-limit `headers` and `timing` are
 * added, and the response is replaced by one that settles or releases as its body is written.
 */
export function handOff(
  p: Prepared,
  c: Context,
  a: Admitted,
  headers: Record<string, string>,
  timing: string,
): void {
  const { decider, onSettle } = p.deps;
  const { statusCounts, settleSources } = p;
  const { decision, requestId, decidedAtMs, request, releaseSlots, waitUntil } = a;
  // The status is known: units held for a status a rule does not count go back (Floodgate's own 502/504
  // included: the proxy's error is the response by now).
  const held = heldUntilStatus(decision, statusCounts);
  const told =
    held.length > 0 || settleSources.size > 0
      ? settleReport(onSettle, c.req.raw, () => request.id())
      : undefined;
  if (held.length > 0) {
    giveBackUncounted(decider, held, statusCounts, c.res.status, requestId, decidedAtMs, waitUntil, told);
  }
  if (c.res.status === 101 || (c.res as { webSocket?: unknown }).webSocket) {
    // A WebSocket's lifetime is not the response's: its slot goes back at once, and its response is
    // passed on untouched (a copy would lose the socket).
    if (releaseSlots) waitUntil(releaseSlots().catch(() => undefined));
    return;
  }
  let response = withHeaders(c.res, headers, timing);
  // A rule that also counts by status settles only a response it counts (the others' units went back above).
  const settling =
    settleSources.size > 0
      ? settlingOf(decision, settleSources, (rule) => statusCounts.get(rule)?.counts(c.res.status) ?? true)
      : undefined;
  if (settling) {
    // A refund's ledger entry is named by the request (lua/refund.lua): a real id, not the shared "-".
    const settleId = requestId === NO_REQUEST_ID ? request.id() : requestId;
    // A body passed through a scanner gives the slots back itself once written (it may be workerd's native pipe,
    // which the release's own pipe cannot take as its source).
    const written =
      releaseSlots && c.error === undefined
        ? () => waitUntil(releaseSlots().catch(() => undefined))
        : undefined;
    const context = {
      decider,
      requestId: settleId,
      decidedAtMs,
      waitUntil,
      log: (line: string) => console.warn(line),
      report: told,
      written,
    };
    const settled = settleFrom(response, settling, context, c.error !== undefined);
    response = settled.response;
    if (settled.passed && written) {
      replaceResponse(c, response);
      return;
    }
  }
  if (releaseSlots) {
    // A slot is held while the response body is written. A handler that threw (the proxy's 502/504)
    // or a body-less answer has nothing left to write: the slot goes back at once.
    if (c.error !== undefined) waitUntil(releaseSlots().catch(() => undefined));
    else {
      replaceResponse(c, releaseWhenWritten(response, releaseSlots, waitUntil));
      return;
    }
  }
  if (response !== c.res) replaceResponse(c, response);
}
