const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Waits until at least `spanMs` remain in the current window of `periodMs`, windows being aligned to the epoch
 * (a fixed-window counter's, the fallback limiter's, the dashboard's minutes): a test that counts requests in
 * one window must not see it turn mid-test. `now` is the clock that window turns on, in ms: Redis's when the
 * test can read it, else this machine's (which Redis shares in the tests).
 */
export async function awayFromWindowEdge(
  periodMs: number,
  spanMs: number,
  now: () => number | Promise<number> = Date.now,
): Promise<void> {
  const left = periodMs - ((await now()) % periodMs);
  if (left < spanMs) await sleep(left + 100);
}
