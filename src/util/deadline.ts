/**
 * One deadline for every Redis wait of one admin request (a dashboard read, an override change). Each admin
 * command has its own timeout (the store's `adminTimeoutMs`), so steps that run one after the other
 * would each wait it out on a Redis that hangs or answers late. Racing every step against one shared deadline
 * makes the whole request wait at most once (docs/failure-modes.md).
 */
import { deadlineAfter } from "./timer";

/** A step the deadline cut short, or one it did not start because the deadline had passed. */
export class DeadlineError extends Error {
  constructor() {
    super("the wait for Redis ran out");
    // Named as an aborted fetch's timeout is, so a log line reads the same whichever ran out first.
    this.name = "TimeoutError";
  }
}

/** The deadline of one request. Call `cancel` when the request is done, so its timer does not outlive it. */
export interface Deadline {
  /** `start()`'s result, or a `DeadlineError` when the deadline comes first (`start` is not called after it). */
  within<T>(start: () => Promise<T>): Promise<T>;
  /** Ms left, 0 once passed. */
  remainingMs(): number;
  cancel(): void;
}

/** A deadline `ms` from now. */
export function deadlineIn(ms: number): Deadline {
  const atMs = Date.now() + ms;
  let passed = false;
  let expire = () => {};
  const expired = new Promise<never>((_, reject) => {
    expire = () => reject(new DeadlineError());
  });
  // Raced by every step; a request with no step left waiting must not report an unhandled rejection.
  expired.catch(() => {});
  const cancel = deadlineAfter(ms, () => {
    passed = true;
    expire();
  });
  return {
    within: (start) => (passed ? Promise.reject(new DeadlineError()) : Promise.race([start(), expired])),
    remainingMs: () => (passed ? 0 : Math.max(0, atMs - Date.now())),
    cancel,
  };
}

/** No deadline: each step waits as long as its own admin timeout lets it (callers outside a route). */
export const NO_DEADLINE: Deadline = {
  within: (start) => start(),
  remainingMs: () => Number.POSITIVE_INFINITY,
  cancel: () => {},
};

/** Runs `run` under a deadline `ms` from now, and cancels the deadline's timer once it is done. */
export async function withDeadline<T>(ms: number, run: (deadline: Deadline) => Promise<T>): Promise<T> {
  const deadline = deadlineIn(ms);
  try {
    return await run(deadline);
  } finally {
    deadline.cancel();
  }
}
