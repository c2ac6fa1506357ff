/**
 * The regional simulation's profile: fast-check runs the corpus, then random scenarios
 * (test/sim/regions-scenarios.ts), through the regional system (test/sim/regions.ts), and fails on the first
 * violation, shrunk to a minimal scenario, with the seed and path that replay it
 * (`SIM_SEED=… SIM_PATH=… npx vitest run test/node/simulation-regions.test.ts`).
 */
import fc from "fast-check";
import { assertBatch, laneLine } from "./batch";
import { failRun } from "./failure";
import { runRegions } from "./regions";
import { CORPUS, type RegionSize, regionScenario, WARM_UP } from "./regions-scenarios";
import type { RegionScenario, RegionsSetup } from "./regions-types";

/** Runs per fast-check batch in a timed profile (each batch has its own seed). */
const BATCH_RUNS = 10;

/** What a profile ran. */
export interface RegionStats {
  runs: number;
  operations: number;
  admitted: number;
  fromPools: number;
  /** Admin changes made, and those whose pools' drops did not all land (the epoch after each left unchecked). */
  changes: number;
  unchecked: number;
  /** Regional databases killed and restarted; spells the primary was frozen. */
  restarts: number;
  freezes: number;
  elapsedMs: number;
}

/** The scenario with its operations in time order, for a readable report. */
export const printable = (s: RegionScenario): string =>
  JSON.stringify({ ...s, ops: s.ops.map((o, i) => ({ i, ...o })).sort((a, b) => a.at - b.at) }, null, 1);

/**
 * Runs `numRuns` random scenarios of `size` (or batches of them until `untilMs`, the clock's, passes), after
 * the corpus unless `corpus` is false or a replay is asked for; throws fast-check's report of the first
 * violation (shrunk for at most `shrinkMs`). `seed`/`path` replay one.
 */
export async function simulateRegions(
  setup: RegionsSetup,
  size: RegionSize,
  options: {
    numRuns: number;
    untilMs?: number;
    shrinkMs?: number;
    seed?: number;
    path?: string;
    corpus?: boolean;
    /** Run these first instead of the corpus. */
    scenarios?: readonly RegionScenario[];
    lane?: string;
  },
): Promise<RegionStats> {
  const stats: RegionStats = {
    runs: 0,
    operations: 0,
    admitted: 0,
    fromPools: 0,
    changes: 0,
    unchecked: 0,
    restarts: 0,
    freezes: 0,
    elapsedMs: 0,
  };
  await runRegions(WARM_UP, setup);
  const startedAt = Date.now();
  let failedOnce = false;
  let examples: [RegionScenario][] =
    options.corpus === false || options.path !== undefined
      ? []
      : (options.scenarios ?? CORPUS).map((c) => [c]);
  let left = options.numRuns;
  do {
    const batch = Math.min(left, options.untilMs === undefined ? left : BATCH_RUNS);
    const seed = options.seed ?? (Date.now() ^ (Math.random() * 0x100000000)) | 0;
    const corpus = examples;
    let run = 0;
    const property = fc.asyncProperty(regionScenario(size), async (s) => {
      const index = run++;
      const report = await runRegions(s, setup).catch((error: unknown) => {
        // Not a violation: the simulation itself broke (a server that would not start). Said at once, as fast-check
        // shrinks it before it reports.
        if (!failedOnce)
          console.log(`simulation: a run failed (${String(error)}); shrinking…\n${printable(s)}`);
        failedOnce = true;
        throw error;
      });
      stats.runs++;
      stats.operations += report.operations;
      stats.admitted += report.admitted;
      stats.fromPools += report.fromPools;
      stats.changes += report.changes;
      stats.unchecked += report.unchecked;
      stats.restarts += report.restarts;
      stats.freezes += report.freezes;
      if (report.violations.length === 0) return;
      // Printed at once, the first time: replayable even if the shrinking is cut short.
      const replay = failedOnce
        ? undefined
        : index < corpus.length
          ? `scenario ${index} of ${options.scenarios ? "SIM_SCENARIO" : "the corpus"} (test/sim/regions-scenarios.ts)`
          : `SIM_SEED=${seed} SIM_PATH=${options.path ?? index - corpus.length}`;
      failedOnce = true;
      failRun(report.violations, printable(s), replay);
    });
    await assertBatch(property, {
      runs: batch,
      corpus,
      seed,
      path: options.path,
      runMs: 30_000,
      shrinkMs: options.shrinkMs,
    });
    examples = [];
    left -= batch;
    if (options.untilMs !== undefined)
      console.log(laneLine("simulation (regions)", options.lane, stats, startedAt));
  } while (left > 0 && Date.now() < (options.untilMs ?? 0) && options.seed === undefined);
  stats.elapsedMs = Date.now() - startedAt;
  return stats;
}
