// Model-based simulation of the whole decision system (docs/exactness.md): random scenarios of requests,
// leases, split decisions, delay holds, resets and network faults through several isolates sharing the run's
// real Redis, checked against the reference model. The fast profile runs here; `npm run simulate -- --minutes N`
// runs the same property for N minutes (SIM_MINUTES), and SIM_SEED / SIM_PATH replay a reported failure.
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { startNetwork, type Network } from "../sim/network";
import { simulate } from "../sim/profile";
import { FAST, LONG } from "../sim/scenarios";
import { directRedis } from "./lua-support";

const minutes = Number(process.env.SIM_MINUTES ?? 0);
const seed = process.env.SIM_SEED === undefined ? undefined : Number(process.env.SIM_SEED);
const path = process.env.SIM_PATH;

let network: Network;
let redis: IORedis;
beforeAll(async () => {
  network = await startNetwork(inject("redisRestUrl"));
  redis = directRedis();
});
afterAll(async () => {
  await network.close();
  await redis.quit();
});

it(
  minutes > 0
    ? `keeps every invariant for ${minutes} minute(s) of random scenarios`
    : "keeps every invariant over random scenarios (fast profile)",
  async () => {
    const setup = { network, token: inject("redisRestToken"), redis };
    const stats = await simulate(setup, minutes > 0 ? LONG : FAST, {
      numRuns: minutes > 0 ? 1_000_000 : 18,
      ...(minutes > 0 && { untilMs: Date.now() + minutes * 60_000 }),
      ...(seed !== undefined && { seed }),
      ...(path !== undefined && { path }),
    });
    const perSecond = (stats.operations / stats.elapsedMs) * 1000;
    console.log(
      `simulation: ${stats.runs} runs, ${stats.operations} operations (${stats.admitted} admitted, ` +
        `${stats.fromLeases} from leases, ${stats.shortSpends} short spends, ${stats.delayed} delayed, ` +
        `${stats.givenBack} given back) in ${(stats.elapsedMs / 1000).toFixed(1)} s: ` +
        `${perSecond.toFixed(0)} operations/s, 0 violations`,
    );
    expect(stats.runs).toBeGreaterThan(0);
  },
  minutes > 0 ? minutes * 60_000 + 600_000 : 120_000,
);
