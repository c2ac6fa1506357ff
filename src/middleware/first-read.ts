/**
 * A fresh isolate's first live-mode read, which the Worker's limiter decides beside instead of after
 * (`decideWhileModesLoad`, src/middleware/limiter.ts; docs/going-global.md): the request is decided under the
 * configured modes while the read is on its way, so it pays one Redis round trip, not two. When the read
 * arrives and shows a live switch of one of the rules (rare: a switch in force while a new isolate starts),
 * the request is decided again under it, and what the first decision holds goes back.
 */
import type { Decider, Decision, Mode } from "../engine/types";
import { effectiveMode, type LiveModes } from "../rules/modes";
import { giveBack } from "./delay";
import { heldSlots } from "./release";

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
