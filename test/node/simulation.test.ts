// Model-based simulation of the whole decision system (docs/exactness.md): random scenarios of requests,
// leases, split decisions, delay holds, resets and network faults through several isolates sharing the run's
// real Redis, checked against the reference model. The fast profile runs here; `npm run simulate -- --minutes N`
// runs the same property for N minutes (SIM_MINUTES), and SIM_SEED / SIM_PATH replay a reported failure.
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { simulateLanes } from "../sim/profile";
import { FAST, LONG } from "../sim/scenarios";
import { directRedis } from "./lua-support";

const minutes = Number(process.env.SIM_MINUTES ?? 0);
const seed = process.env.SIM_SEED === undefined ? undefined : Number(process.env.SIM_SEED);
const path = process.env.SIM_PATH;

let redis: IORedis;
beforeAll(() => {
  redis = directRedis();
});
afterAll(async () => {
  await redis.quit();
});

it(
  minutes > 0
    ? `keeps every invariant for ${minutes} minute(s) of random scenarios`
    : "keeps every invariant over random scenarios (fast profile)",
  async () => {
    const stats = await simulateLanes(
      inject("redisRestUrl"),
      inject("redisRestToken"),
      redis,
      minutes > 0 ? LONG : FAST,
      {
        lanes: Number(process.env.SIM_LANES ?? 4),
        numRuns: Number(process.env.SIM_RUNS ?? (minutes > 0 ? 1_000_000 : 6)),
        shrinkMs: minutes > 0 ? 600_000 : 70_000,
        corpus: process.env.SIM_CORPUS !== "0",
        ...(minutes > 0 && { untilMs: Date.now() + minutes * 60_000 }),
        ...(seed !== undefined && { seed }),
        ...(path !== undefined && { path }),
      },
    );
    const perSecond = (stats.operations / stats.elapsedMs) * 1000;
    console.log(
      `simulation: ${stats.runs} runs, ${stats.operations} operations (${stats.admitted} admitted, ` +
        `${stats.fromLeases} from leases, ${stats.shortSpends} short spends, ${stats.delayed} delayed, ` +
        `${stats.givenBack} given back, ${stats.fellBack} let through by a fallback limiter, ` +
        `${stats.monitored} units counted by monitor rules, ${stats.uncounted} responses not counted by status, ` +
        `${stats.settled} settled, ${stats.blocked} denials by a penalty box, ${stats.shed} shed, ` +
        `${stats.refused} refused and ${stats.exempted} exempted by live lists; ` +
        `calls to Redis: ${JSON.stringify(stats.calls)}) in ` +
        `${(stats.elapsedMs / 1000).toFixed(1)} s: ` +
        `${perSecond.toFixed(0)} operations/s, 0 violations`,
    );
    expect(stats.runs).toBeGreaterThan(0);
    if (process.env.SIM_CORPUS !== "0" && seed === undefined) {
      // The corpus (test/sim/corpus.ts) meets counting by status, settlement, the penalty box, shedding and lists.
      expect(stats.uncounted).toBeGreaterThan(0);
      expect(stats.settled).toBeGreaterThan(0);
      expect(stats.blocked).toBeGreaterThan(0);
      expect(stats.shed).toBeGreaterThan(0);
      expect(stats.refused).toBeGreaterThan(0);
      expect(stats.exempted).toBeGreaterThan(0);
    }
  },
  // Room for the runs and for shrinking a failure (both bounded above), then for the report.
  (minutes > 0 ? minutes * 60_000 + 900_000 : 40_000 + 70_000) + 60_000,
);
