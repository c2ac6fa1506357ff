import { describe, expect, it } from "vitest";
import { deadlineAfter, RunningTimer, within } from "../../src/util/timer";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A running timer that fires in `ms`, as the decider's budget timer does. */
function runningFor(ms: number): RunningTimer {
  const timer = new RunningTimer(Date.now() + ms);
  setTimeout(() => timer.fire(), ms);
  return timer;
}

/** Resolves with the ms elapsed when `deadlineAfter` fires, or `undefined` if it has not by `waitMs`. */
async function firesAfter(arm: (onTimeout: () => void) => () => void, waitMs: number, cancelAtMs?: number) {
  const startedAt = Date.now();
  let firedAt: number | undefined;
  const cancel = arm(() => {
    firedAt = Date.now() - startedAt;
  });
  if (cancelAtMs !== undefined) {
    await sleep(cancelAtMs);
    cancel();
  }
  await sleep(waitMs - (cancelAtMs ?? 0));
  return firedAt;
}

describe("one timer per request", () => {
  it("fires after its own bound when no other timer runs", async () => {
    const at = await firesAfter((fire) => deadlineAfter(60, fire), 300);
    expect(at).toBeGreaterThanOrEqual(55);
  });

  it("hung on a shorter running timer, fires at its own bound: not when that one fires, and not never", async () => {
    const at = await firesAfter((fire) => deadlineAfter(120, fire, runningFor(30)), 400);
    expect(at).toBeGreaterThanOrEqual(115);
  });

  it("does not fire once cancelled, before or after the running timer fired", async () => {
    expect(await firesAfter((fire) => deadlineAfter(100, fire, runningFor(30)), 250, 10)).toBeUndefined();
    expect(await firesAfter((fire) => deadlineAfter(100, fire, runningFor(30)), 250, 60)).toBeUndefined();
  });

  it("keeps a timer of its own when the running one would fire after its bound", async () => {
    const at = await firesAfter((fire) => deadlineAfter(50, fire, runningFor(1_000)), 300);
    expect(at).toBeGreaterThanOrEqual(45);
    expect(at).toBeLessThan(900);
  });
});

describe("within", () => {
  it("gives the promise's value when it settles in time, undefined once the time is up, and its error", async () => {
    expect(
      await within(
        sleep(10).then(() => "in time"),
        1000,
      ),
    ).toBe("in time");
    const late = sleep(300).then(() => "late");
    const startedAt = Date.now();
    expect(await within(late, 50)).toBeUndefined();
    expect(Date.now() - startedAt).toBeLessThan(250);
    expect(await late).toBe("late"); // it went on
    await expect(within(Promise.reject(new Error("failed")), 1000)).rejects.toThrow("failed");
  });
});
