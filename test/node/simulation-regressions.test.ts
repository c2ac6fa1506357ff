// Violations the simulator reported, each kept as its shrunk scenario (docs/exactness.md, "Violations found"):
// run through the simulated system (test/sim/system.ts) on the run's real Redis, each must now pass, and the
// part of the simulator each one fixed is checked on its own so that it can fail.
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type Network, startNetwork } from "../sim/network";
import { logUnits, runScenario, type Scenario } from "../sim/system";
import { directRedis, requestId, ruleCall, testStore, uniquePrefix } from "./lua-support";
import { stateKey } from "../../src/engine/keys";

let redis: IORedis;
let network: Network;
beforeAll(async () => {
  redis = directRedis();
  network = await startNetwork(inject("redisRestUrl"));
});
afterAll(async () => {
  await network.close();
  await redis.quit();
});

describe("the end-of-run count of a sliding log", () => {
  // Found by the fast profile (SIM_SEED=-821691626 SIM_PATH=2), shrunk to one fill: 11 requests of cost 1
  // admitted into a log of 11 an hour, read back as "12 entries, admitted 11". The log holds one member per
  // request and a `total` member since the bounded layout (docs/script.md, "Sliding-log state"): the check
  // counted members (ZCARD), `total` among them, not units. The engine had admitted and stored exactly 11.
  const FILL_A_LOG: Scenario = {
    rules: [{ algorithm: "sliding-log", limit: 11, periodMs: 3_600_000, burst: 11, delayMs: 0 }],
    isolates: 2,
    endpoints: 1,
    cluster: false,
    leaseMs: 500,
    timeoutMs: 5000, // (200 in the run that found it: a loaded machine then fails the fill's first call closed)
    edgeMs: 1000,
    ops: [{ kind: "fill", at: 0, call: { rule: 0, identity: 0, cost: 1 } }],
  };

  it("the shrunk scenario passes", async () => {
    const report = await runScenario(FILL_A_LOG, network, inject("redisRestToken"), redis);
    expect(report.violations).toEqual([]);
    expect(report.admitted).toBe(11);
  });

  it("reads units and `total` from the log the script writes, not its members", async () => {
    const prefix = uniquePrefix("sim-log");
    const store = testStore(prefix);
    const call = ruleCall({ algorithm: "sliding-log", limit: 10, periodMs: 3_600_000 });
    for (const cost of [1, 3, 2]) await store.decide([{ ...call, cost }], requestId());
    const entries = await redis.zrange(stateKey(prefix, call.rule, call.identityHash), 0, -1, "WITHSCORES");
    expect(entries.length / 2).toBe(4); // three requests and `total`
    expect(logUnits(entries)).toEqual({ units: 6, members: 3, total: 6 });
    // A member of the layout before holds one unit; a `total` off by one is told apart from the members.
    expect(logUnits(["a:1:0", "1", "a:1:1", "1", "total", "-3"])).toEqual({ units: 2, members: 2, total: 3 });
  });
});
