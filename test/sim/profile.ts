/**
 * One simulation profile: fast-check runs random scenarios (test/sim/scenarios.ts) through the simulated
 * system (test/sim/system.ts) and fails on the first violation, shrunk to a minimal scenario, with the seed
 * and path that replay it (`SIM_SEED=… SIM_PATH=… npx vitest run test/node/simulation.test.ts`).
 */
import fc from "fast-check";
import type { Redis as IORedis } from "ioredis";
import type { Network } from "./network";
import { scenario, type Size } from "./scenarios";
import { runScenario, type Scenario } from "./system";

/** What a profile ran. */
export interface ProfileStats {
  runs: number;
  operations: number;
  admitted: number;
  fromLeases: number;
  shortSpends: number;
  delayed: number;
  givenBack: number;
  elapsedMs: number;
}

/** Where the simulated system reaches Redis. */
export interface Setup {
  network: Network;
  token: string;
  redis: IORedis;
}

/** The scenario with its operations in time order, for a readable report. */
export const printable = (s: Scenario): string =>
  JSON.stringify({ ...s, ops: [...s.ops].map((o, i) => ({ i, ...o })).sort((a, b) => a.at - b.at) }, null, 1);

/**
 * Runs `numRuns` scenarios of `size` (or until `untilMs`, the clock's, passes), throwing fast-check's report of
 * the first violation found (shrunk). `seed`/`path` replay one.
 */
export async function simulate(
  setup: Setup,
  size: Size,
  options: { numRuns: number; untilMs?: number; seed?: number; path?: string },
): Promise<ProfileStats> {
  const stats: ProfileStats = {
    runs: 0,
    operations: 0,
    admitted: 0,
    fromLeases: 0,
    shortSpends: 0,
    delayed: 0,
    givenBack: 0,
    elapsedMs: 0,
  };
  const startedAt = Date.now();
  const property = fc.asyncProperty(scenario(size), async (s) => {
    const report = await runScenario(s, setup.network, setup.token, setup.redis);
    stats.runs++;
    stats.operations += report.operations;
    stats.admitted += report.admitted;
    stats.fromLeases += report.fromLeases;
    stats.shortSpends += report.shortSpends;
    stats.delayed += report.delayed;
    stats.givenBack += report.givenBack;
    if (report.violations.length > 0) {
      throw new Error(
        `${report.violations.length} violation(s):\n${report.violations
          .slice(0, 5)
          .map((v) => `  ${v.invariant}: ${v.detail} (ops ${v.ops.join(", ")})`)
          .join("\n")}\nscenario: ${printable(s)}`,
      );
    }
  });
  await fc.assert(property, {
    numRuns: options.numRuns,
    ...(options.seed !== undefined && { seed: options.seed }),
    ...(options.path !== undefined && { path: options.path }),
    ...(options.untilMs !== undefined && {
      interruptAfterTimeLimit: Math.max(1, options.untilMs - Date.now()),
      markInterruptAsFailure: false,
    }),
    endOnFailure: false,
  });
  stats.elapsedMs = Date.now() - startedAt;
  return stats;
}
