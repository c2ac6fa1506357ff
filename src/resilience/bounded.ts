/**
 * One store call bounded by the request's Redis budget (docs/failure-modes.md: the budget), with ONE
 * timer for the whole request (src/util/timer.ts says why one).
 */
import type { DecideOptions, Decider, Decision, RuleCall } from "../engine/types";
import { RunningTimer } from "../util/timer";

/**
 * `store.decide` bounded by ONE timer (a timer costs a few % of a request's CPU in workerd): the signal
 * aborts the store's requests at `budgetMs` and only then starts the `guardMs` grace, after which the
 * decider stops waiting on a store that did not stop. `AbortSignal.timeout` measured cheaper than
 * `setTimeout` + `clearTimeout` + `AbortController`. Its one listener stays (removing it costs as much as
 * adding it): once the decision is in, it only tells `onTimer`'s later step of the request that it fired.
 */
export function decideWithin(
  store: Pick<Decider, "decide">,
  calls: RuleCall[],
  requestId: string,
  budgetMs: number,
  guardMs: number,
  onTimer: DecideOptions["onTimer"],
  ask?: Pick<DecideOptions, "lease" | "stamps">,
): Promise<Decision> {
  return new Promise((resolve, reject) => {
    const signal = AbortSignal.timeout(budgetMs);
    const timer = new RunningTimer(Date.now() + budgetMs);
    onTimer?.(timer);
    let settled = false;
    let guard: ReturnType<typeof setTimeout> | undefined;
    signal.addEventListener("abort", () => {
      if (!settled) {
        guard = setTimeout(
          () => reject(Object.assign(new Error("decision deadline passed"), { kind: "timeout" })),
          guardMs,
        );
      }
      timer.fire();
    });
    const settle = () => {
      settled = true;
      if (guard !== undefined) clearTimeout(guard);
    };
    store.decide(calls, requestId, ask ? { budgetMs, signal, ...ask } : { budgetMs, signal }).then(
      (decision) => {
        settle();
        resolve(decision);
      },
      (error: unknown) => {
        settle();
        reject(error);
      },
    );
  });
}
