/**
 * Delay instead of deny (docs/algorithms.md, "Delay instead of deny"): a token-bucket/GCRA rule with a `delay` admits a
 * request over the rate with a slot the script reserved for it, `delayMs` from now. The request waits here
 * for its slot, holding no Redis call open; several delayed rules wait for the longest (the script reserved
 * all of them or none). A client that goes away while waiting gives its slots back.
 */
import type { Decider, Decision } from "../engine/types";

/**
 * How long this request must wait before it is passed on, ms: the longest wait of an `on` rule that
 * delayed it, never more than that rule's own `delay` (a `monitor` rule never holds a request).
 */
export function delayOf(decision: Decision): number {
  let waitMs = 0;
  for (const r of decision.results) {
    if (r.delayMs && r.call.mode === "on" && r.source === "redis") {
      waitMs = Math.max(waitMs, Math.min(r.delayMs, r.call.delayMs ?? 0));
    }
  }
  return waitMs;
}

/**
 * Waits `ms` without blocking the isolate; resolves `true` when the wait ran out, `false` as soon as
 * `signal` aborts (the client went away).
 */
export function waitForSlot(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Gives back every slot the decision reserved for a request that will never be passed on. The script
 * returns a slot only while it is still the last one reserved, so a give-back never admits anyone early; the
 * store gives back only the slots of rules with a delay (src/engine/store.ts `release`).
 */
export function giveBack(decider: Decider, decision: Decision, requestId: string): Promise<void> {
  const reserved = decision.results.filter((r) => r.reservation !== undefined);
  return Promise.all(reserved.map((r) => decider.release(r.call, requestId, r.reservation))).then(
    () => undefined,
  );
}
