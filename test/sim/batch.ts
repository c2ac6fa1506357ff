/**
 * What both profiles (test/sim/profile.ts, test/sim/regions-profile.ts) do with a batch of runs: assert it
 * through fast-check with the corpus first and a guard against a hang, and, in a timed profile, say how far
 * its lane has got.
 */
import fc from "fast-check";

/** One batch of `runs` random runs after `corpus`, under `seed` (and `path`: a replay). */
export function assertBatch<T>(
  property: fc.IAsyncProperty<[T]>,
  batch: {
    runs: number;
    corpus: [T][];
    seed: number;
    path?: string | undefined;
    /** The longest a run may take, ms; with `shrinkMs`, the guard against a hang. */
    runMs: number;
    shrinkMs?: number | undefined;
  },
): Promise<void> {
  const runs = batch.runs + batch.corpus.length;
  return fc.assert(property, {
    numRuns: runs,
    seed: batch.seed,
    examples: batch.corpus,
    ...(batch.path !== undefined && { path: batch.path }),
    // A guard against a hang: far beyond what the batch's runs take, plus the shrinking.
    interruptAfterTimeLimit: runs * batch.runMs + (batch.shrinkMs ?? 60_000),
    markInterruptAsFailure: true,
    endOnFailure: false,
  });
}

/** A timed profile's progress line for one lane, after a batch with no violation. */
export function laneLine(
  name: string,
  lane: string | undefined,
  stats: { runs: number; operations: number },
  startedAt: number,
): string {
  const seconds = (Date.now() - startedAt) / 1000;
  return (
    `${name} lane ${lane ?? "0"}: ${stats.runs} runs, ${stats.operations} operations ` +
    `in ${seconds.toFixed(0)} s (${(stats.operations / seconds).toFixed(0)}/s), 0 violations`
  );
}
