/**
 * The live modes a request is decided under, and a fresh isolate's first read of them. A warm isolate's come
 * without a promise: nothing to wait for. A fresh isolate's first read is a promise: a middleware's own is
 * waited for, and the decision gets what is left of the same budget (no request waits on Redis longer than
 * `timeoutMs` in all). The Worker's (`decideWhileModesLoad`, docs/going-global.md) is not: the request is
 * decided under the configured modes (with no override index, every call reads its override: exact) while
 * the read is on its way, so it pays one Redis round trip, not two. When the read arrives and shows a live
 * switch of one of the rules (rare: a switch in force while a new isolate starts), the request is decided
 * again under it, and what the first decision holds goes back.
 */
import type { Context } from "hono";
import type { Decider, Decision, Mode, WaitUntil } from "../engine/types";
import type { RequestFacts } from "../identity";
import { effectiveMode, type LiveModes, NO_LIVE_MODES } from "../rules/modes";
import { ProblemError } from "../util/problem";
import { within } from "../util/timer";
import { decideUnder, madeHere, type Outcome } from "./decide";
import { giveBack } from "./delay";
import type { Prepared } from "./limiter-deps";
import type { PlannedRule } from "./plan";
import { heldSlots } from "./release";

/**
 * The request's decision under the live modes in force (`matched`: its counting rules, or absent: walked
 * among the action rules). Without a promise when nothing needs one.
 */
export function decideRequest(
  p: Prepared,
  c: Context,
  request: RequestFacts,
  matched: PlannedRule[] | undefined,
  waitUntil: WaitUntil,
): Outcome | Promise<Outcome> {
  const { deps } = p;
  const current = deps.liveModes ? deps.liveModes(c, waitUntil) : NO_LIVE_MODES;
  if (!(current instanceof Promise)) {
    return decideUnder(p, c, request, current, matched, deps.timeoutMs, waitUntil);
  }
  const readStartedAt = Date.now();
  if (deps.decideWhileModesLoad)
    return decideBeside(p, c, request, matched, current, readStartedAt, waitUntil);
  return current.then((live) => {
    const budgetMs = deps.timeoutMs - (Date.now() - readStartedAt);
    return decideUnder(p, c, request, live, matched, budgetMs, waitUntil);
  });
}

/** Decides under the configured modes while `reading` is on its way, and again if it shows a switch. */
async function decideBeside(
  p: Prepared,
  c: Context,
  request: RequestFacts,
  matched: PlannedRule[] | undefined,
  reading: Promise<LiveModes>,
  readStartedAt: number,
  waitUntil: WaitUntil,
): Promise<Outcome> {
  const { deps } = p;
  const live = NO_LIVE_MODES;
  const first = decideUnder(p, c, request, live, matched, deps.timeoutMs, waitUntil);
  const decided = first instanceof Promise ? await first : first;
  if (decided !== undefined && !(decided instanceof ProblemError) && madeHere(decided.decision)) {
    // Async rules only, decided in the isolate from what it knows: the read lands in the background, and
    // until it is in they run in their configured modes (docs/going-global.md, "Async rules").
    waitUntil(reading.catch(() => undefined));
    return decided;
  }
  // The read went out before the decision: it is in by now, or waited for within what is left of the
  // budget (a read that fails or is late leaves the configured modes, as a fresh isolate always had).
  const leftMs = () => Math.max(0, deps.timeoutMs - (Date.now() - readStartedAt));
  const read = await within(reading, leftMs()).catch(() => undefined);
  if (read) deps.lists?.sync(read, waitUntil);
  if (!read || sameModes(p.modeRules, live, read, deps.mode)) return decided;
  if (decided && !(decided instanceof ProblemError)) {
    waitUntil(undo(deps.decider, decided.decision, decided.requestId));
  }
  return decideUnder(p, c, request, read, matched, leftMs(), waitUntil);
}

/**
 * Whether every rule (counting or action: an action rule's mode changes which counting rules apply) runs in
 * the same mode under both copies of the live modes.
 */
export function sameModes(
  rules: readonly { name: string; mode?: Mode | undefined }[],
  a: LiveModes,
  b: LiveModes,
  configured: Mode,
): boolean {
  return rules.every((rule) => effectiveMode(rule, a, configured) === effectiveMode(rule, b, configured));
}

/**
 * Gives back what a decision that will not be acted on holds: its concurrency slots and delayed slots. What
 * it counted stays counted (a rule switched off or to monitor may count one request too many; never one
 * admitted too many).
 */
export function undo(decider: Decider, decision: Decision, requestId: string): Promise<void> {
  return Promise.all([
    ...heldSlots(decision).map((r) => decider.release(r.call, requestId)),
    giveBack(decider, decision, requestId),
  ]).then(
    () => undefined,
    () => undefined,
  );
}
