/**
 * One simulation profile: fast-check runs random scenarios (test/sim/scenarios.ts) through the simulated
 * system (test/sim/system.ts) and fails on the first violation, shrunk to a minimal scenario, with the seed
 * and path that replay it (`SIM_SEED=… SIM_PATH=… npx vitest run test/node/simulation.test.ts`).
 */
import fc from "fast-check";
import type { Redis as IORedis } from "ioredis";
import { assertBatch, laneLine } from "./batch";
import { ALONGSIDE, CORPUS, CORPUS_REPEATS, REPEATS, WARM_UP } from "./corpus";
import { failRun } from "./failure";
import { type CommandKind, type Network, startNetwork } from "./network";
import type { Counts, Scenario } from "./scenario";
import { type Size, scenario } from "./scenarios";
import { runScenario } from "./system";

/** Runs per fast-check batch in a timed profile (each batch has its own seed). */
const BATCH_RUNS = 10;

/** What a profile ran. */
export interface ProfileStats extends Counts {
  runs: number;
  /** Calls that reached Redis, by kind (test/sim/network.ts): decisions, lease calls, refunds, give-backs. */
  calls?: Record<string, number>;
  elapsedMs: number;
}

const NO_COUNTS: Counts = {
  operations: 0,
  admitted: 0,
  fromLeases: 0,
  shortSpends: 0,
  delayed: 0,
  givenBack: 0,
  fellBack: 0,
  monitored: 0,
  uncounted: 0,
  settled: 0,
  blocked: 0,
  shed: 0,
  refused: 0,
  exempted: 0,
};
const COUNTED = Object.keys(NO_COUNTS) as (keyof Counts)[];

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
  options: {
    numRuns: number;
    untilMs?: number;
    shrinkMs?: number;
    seed?: number;
    path?: string;
    /**
     * Which share of the corpus (test/sim/corpus.ts) this lane runs first: the scenarios that need the
     * machine to themselves (`alone`) or the others, split over the lanes; `false`: none. @default all
     */
    corpus?: { lane: number; lanes: number; alone: boolean } | false;
    /** The lane's name in progress lines. @default "0" */
    lane?: string;
  },
): Promise<ProfileStats> {
  const stats: ProfileStats = { runs: 0, ...NO_COUNTS, elapsedMs: 0 };
  // A lane's first run is cold (scripts loaded, code not yet warm): one unchecked run first.
  await runScenario(WARM_UP, setup.network, setup.token, setup.redis);
  const startedAt = Date.now();
  const untilMs = options.untilMs ?? Number.POSITIVE_INFINITY;
  let failedOnce = false;
  let examples: [Scenario][] =
    options.path !== undefined || options.corpus === false
      ? []
      : CORPUS.filter((c) => !options.corpus || ALONGSIDE.has(c) !== options.corpus.alone)
          .flatMap((c) => Array.from({ length: REPEATS.get(c) ?? CORPUS_REPEATS }, (): [Scenario] => [c]))
          .filter((_, i) => !options.corpus || i % options.corpus.lanes === options.corpus.lane);
  // Batches of runs, each with a seed of its own, until `numRuns` or `untilMs`: a failure is shrunk for at most
  // `shrinkMs` (fast-check then reports the smallest failing scenario found so far).
  let left = options.numRuns;
  do {
    const batch = Math.min(left, options.untilMs === undefined ? left : BATCH_RUNS);
    const seed = options.seed ?? (Date.now() ^ (Math.random() * 0x100000000)) | 0;
    const corpus = examples;
    let run = 0;
    const property = fc.asyncProperty(scenario(size), async (s) => {
      const report = await runScenario(s, setup.network, setup.token, setup.redis);
      const index = run++;
      stats.runs++;
      for (const k of COUNTED) stats[k] += report[k];
      if (report.violations.length === 0) return;
      // Printed at once, the first time: replayable even if the shrinking is cut short.
      const replay = failedOnce
        ? undefined
        : index < corpus.length
          ? `corpus scenario ${CORPUS.indexOf(s)} (test/sim/corpus.ts)`
          : `SIM_SEED=${seed} SIM_PATH=${options.path ?? index - corpus.length}`;
      failedOnce = true;
      failRun(report.violations, printable(s), replay);
    });
    await assertBatch(property, {
      runs: batch,
      corpus,
      seed,
      path: options.path,
      runMs: 20_000,
      shrinkMs: options.shrinkMs,
    });
    examples = [];
    left -= batch;
    if (options.untilMs !== undefined) console.log(laneLine("simulation", options.lane, stats, startedAt));
  } while (left > 0 && Date.now() < untilMs && options.seed === undefined);
  stats.elapsedMs = Date.now() - startedAt;
  return stats;
}

/** Options of {@link simulateLanes}. */
export interface LaneOptions {
  /** Lanes run side by side, each its own fast-check property, seed and network. */
  lanes: number;
  /** Runs per lane. */
  numRuns: number;
  /** Stop starting runs once the clock passes this (ms). */
  untilMs?: number;
  /** Longest a failure is shrunk, ms. @default 60000 */
  shrinkMs?: number;
  /** Run the corpus first, alone, one scenario at a time. @default true */
  corpus?: boolean;
  /** Replays one failure (one lane). */
  seed?: number;
  path?: string;
}

/**
 * `lanes` profiles side by side (a run spends most of its time waiting for windows and leases to end, so lanes
 * multiply what a minute checks); the first failure is thrown once every lane has stopped.
 */
export async function simulateLanes(
  restUrl: string,
  token: string,
  redis: IORedis,
  size: Size,
  options: LaneOptions,
): Promise<ProfileStats> {
  const lanes = options.seed !== undefined ? 1 : options.lanes;
  const networks = await Promise.all(Array.from({ length: lanes }, () => startNetwork(restUrl)));
  try {
    const { lanes: _, corpus, ...each } = options;
    // The corpus's historical bugs first, one scenario at a time with nothing else running: they show at
    // moments around a window edge or a refill, which other lanes' runs (same process, same event loop) would
    // make late. Its scenarios that meet a mechanism every run go to the lanes, each lane some of them first.
    const first =
      corpus !== false && options.path === undefined
        ? [
            await simulate({ network: networks[0] as Network, token, redis }, size, {
              ...each,
              numRuns: 0,
              corpus: { lane: 0, lanes: 1, alone: true },
              lane: "corpus",
            }),
          ]
        : [];
    const settled = await Promise.allSettled(
      networks.map((network, lane) =>
        simulate({ network, token, redis }, size, {
          ...each,
          corpus: corpus !== false && options.path === undefined && { lane, lanes, alone: false },
          lane: String(lane),
        }),
      ),
    );
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed) throw failed.reason;
    const all = [...first, ...settled.map((s) => (s as PromiseFulfilledResult<ProfileStats>).value)];
    const sum = (f: (s: ProfileStats) => number) => all.reduce((n, s) => n + f(s), 0);
    return {
      runs: sum((s) => s.runs),
      ...(Object.fromEntries(COUNTED.map((k) => [k, sum((s) => s[k])])) as unknown as Counts),
      calls: Object.fromEntries(
        Object.keys(networks[0]?.stats.byKind ?? {}).map((kind) => [
          kind,
          networks.reduce((n, net) => n + (net.stats.byKind[kind as CommandKind] ?? 0), 0),
        ]),
      ),
      elapsedMs:
        (first[0]?.elapsedMs ?? 0) +
        Math.max(...settled.map((s) => (s as PromiseFulfilledResult<ProfileStats>).value.elapsedMs)),
    };
  } finally {
    await Promise.all(networks.map((n) => n.close()));
  }
}
