/**
 * The simulated system (docs/exactness.md, "What the simulator drives"): a scenario's isolates
 * (test/sim/isolates.ts) sharing one real Redis through the simulated network (test/sim/network.ts), driven by
 * its timed operations, which run concurrently: requests of random cost over one or two rules
 * (test/sim/request.ts: split decisions and their refunds, leases, delay holds and give-backs, concurrency
 * slots, responses), bursts that make an identity hot, fills, admin resets and overrides (test/sim/admin.ts),
 * live mode switches, and network faults. What clients were let through is recorded (test/sim/record.ts), and
 * the model checks it (test/sim/checks.ts), then what Redis holds at the end (test/sim/end-state.ts).
 */
import type { Redis as IORedis } from "ioredis";
import { adminOf, ruleConfig } from "./admin";
import { checkRecord } from "./checks";
import { checkState } from "./end-state";
import { ruleCall, startIsolates } from "./isolates";
import { SimLists } from "./lists";
import type { Network } from "./network";
import { RunRecord } from "./record";
import { requestsOf, sleep } from "./request";
import type { RunReport, Scenario, SimRule } from "./scenario";

export { type Change, type Epoch, epochsOf, inEffect } from "./epochs";
export { logUnits } from "./end-state";
export { ruleCall } from "./isolates";
export * from "./scenario";

let runs = 0;

/** Runs `scenario` against Redis through `network`; `redis` (direct) reads the state left at the end. */
export async function runScenario(
  scenario: Scenario,
  network: Network,
  token: string,
  redis: IORedis,
): Promise<RunReport> {
  const prefix = `sim-${process.pid}-${runs++}-${Date.now().toString(36)}`;
  const isolates = startIsolates(scenario, network, token, prefix);
  const { background, deciders, modes } = isolates;
  const record = new RunRecord();
  const tails: Promise<void>[] = [];
  const lists =
    (scenario.actions?.length ?? 0) > 0
      ? new SimLists(scenario, isolates, scenario.rules.map(ruleConfig), prefix)
      : undefined;
  const request = requestsOf(scenario, isolates, network, record, tails, lists);
  const { reset, override } = adminOf(scenario, isolates, record, prefix);

  const now = Date.now();
  const firstEdge = now - (now % scenario.edgeMs) + scenario.edgeMs;
  const running = scenario.ops.map(async (o, op) => {
    await sleep(Math.max(0, firstEdge + o.at - Date.now()));
    switch (o.kind) {
      case "request":
        return request(op, o.isolate, o.calls, o);
      case "burst":
        for (let i = 0; i < o.n; i++) {
          const abort = o.abortAfterMs !== undefined ? { abortAfterMs: o.abortAfterMs } : {};
          await request(op, o.isolate, [o.call], { ...abort, answer: o.answer, holdMs: o.holdMs });
        }
        if (o.after) {
          const call = { ...o.call, cost: o.after.cost };
          await request(op, o.isolate, [call], o.after.fault ? { fault: o.after.fault } : {});
        }
        return;
      case "fill":
        for (let i = 0; i <= (scenario.rules[o.call.rule] as SimRule).limit; i++) {
          if (!(await request(op, scenario.isolates, [{ ...o.call, cost: 1 }]))) break;
        }
        return;
      case "reset":
        return reset(o.rule, o.identity);
      case "override":
        return override(o.rule, o.identity, o.set);
      case "fault":
        record.counts.operations++;
        for (let i = 0; i < (o.times ?? 1); i++) network.inject(o.fault);
        return;
      case "list":
        record.counts.operations++;
        return lists?.write(o.isolate, o.list, o.add, o.remove);
      case "mode":
        record.counts.operations++;
        await Promise.all(
          modes.map(async (view, k) => {
            await sleep(o.lagMs[k] ?? 0);
            view[o.rule] = o.mode;
          }),
        );
        return;
    }
  });
  await Promise.all(running);
  await Promise.all(tails);
  network.clear();
  await background.settle();
  await lists?.converge(() => background.settle());

  // Every lease expires; each isolate's next request sweeps it and returns what it did not spend.
  await sleep(scenario.leaseMs + 150);
  const sweeper = ruleCall(scenario, { rule: 0, identity: 99, cost: 1 });
  for (const isolate of deciders) isolate.decideNow?.([sweeper], "-", background.waitUntil); // sweeps first
  await background.settle();

  const violations = [
    ...checkRecord(scenario, record),
    ...(lists?.check(record.faulty(scenario)) ?? []),
    ...(await checkState(scenario, redis, prefix, record)),
  ];
  return { violations, ...record.counts };
}
