/**
 * A request needs at most one timer at a time, and in workerd every timer call (`AbortSignal.timeout`,
 * `setTimeout`, `clearTimeout`) and every abort listener added or removed costs about 1 % of a request's
 * CPU. The decision's budget timer keeps running after the decision is in (an `AbortSignal.timeout` cannot
 * be cleared), so a later wait with a longer bound (the origin's response headers) hangs its own timer on
 * it: armed only when that one fires and the wait is still going on, for what is left of its bound. A fast
 * origin then costs no timer at all.
 */

/** A timer already running for this request, which tells one waiter when it fires. Plain values only. */
export class RunningTimer {
  private waiter: (() => void) | undefined;
  private done = false;

  /** `atMs`: when it fires (`Date.now()` clock). */
  constructor(readonly atMs: number) {}

  /** Whether it has fired. */
  get fired(): boolean {
    return this.done;
  }

  /** Called by the timer's owner when it fires. */
  fire(): void {
    this.done = true;
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.();
  }

  /** Calls `waiter` when the timer fires (replacing an earlier one); `undefined` stops waiting. */
  onFire(waiter: (() => void) | undefined): void {
    this.waiter = waiter;
  }
}

/**
 * Calls `onTimeout` `ms` from now unless the returned `cancel` is called first. With a `running` timer that
 * fires before then, its own timer is armed only when that one fires.
 */
export function deadlineAfter(ms: number, onTimeout: () => void, running?: RunningTimer): () => void {
  const atMs = Date.now() + ms;
  if (running === undefined || running.fired || running.atMs > atMs) {
    const timer = setTimeout(onTimeout, ms);
    return () => clearTimeout(timer);
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  running.onFire(() => {
    timer = setTimeout(onTimeout, Math.max(0, atMs - Date.now()));
  });
  return () => {
    running.onFire(undefined);
    if (timer !== undefined) clearTimeout(timer);
  };
}

/**
 * `promise`'s outcome if it settles within `ms`, else `undefined` once `ms` have passed: the promise goes on,
 * and whoever started it decides what becomes of it. One timer, cleared as soon as the promise settles.
 */
export function within<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  return new Promise((resolve, reject) => {
    const cancel = deadlineAfter(Math.max(0, ms), () => resolve(undefined));
    promise.then(
      (value) => {
        cancel();
        resolve(value);
      },
      (error: unknown) => {
        cancel();
        reject(error);
      },
    );
  });
}
