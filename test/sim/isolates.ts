/**
 * The system under test: several isolates, each the Worker's own stack (`createEngine` with leases, as
 * src/worker.ts builds it), and one more without leases (the fills'), sharing one real Redis through the
 * simulated network (test/sim/network.ts); their background work (`waitUntil`); each isolate's view of each
 * rule's live mode; and a scenario's call as the limiter builds it from the rule.
 */
import type { Decider, RuleCall, WaitUntil } from "../../src/engine/types";
import type { ResilientDecider } from "../../src/resilience/decider";
import { createEngine, type Engine } from "../../src/resilience/engine";
import type { Network } from "./network";
import {
  identityOf,
  limitsOf,
  type Mode,
  ruleName,
  type Scenario,
  type SimCall,
  type SimRule,
} from "./scenario";

/** A scenario's call to one rule, as the limiter builds it from the rule's config and the isolate's mode. */
export function ruleCall(scenario: Scenario, c: SimCall, mode: Exclude<Mode, "off"> = "on"): RuleCall {
  const rule = scenario.rules[c.rule] as SimRule;
  const { limit, burst } = limitsOf(scenario, c);
  const call: RuleCall = {
    rule: ruleName(c.rule),
    algorithm: rule.algorithm,
    limit,
    periodMs: rule.periodMs,
    burst,
    cost: rule.algorithm === "concurrency" ? 1 : c.cost,
    delayMs: rule.delayMs,
    mode,
    failure: rule.failure ?? "closed",
    identityHash: identityOf(c.identity),
    override: true, // the script reads the identity's override (as the edge does for one it knows of)
    // As the config parses it (src/config/rules.ts): a rule that counts by status, settles or blocks is
    // decided by Redis, never from a lease.
    lease: !(rule.count || rule.settle || rule.blockMs !== undefined),
  };
  if (rule.count) call.givesBackAfterResponse = true;
  if (rule.blockMs !== undefined) call.blockMs = rule.blockMs;
  return call;
}

/** Background work of every isolate (`waitUntil`), awaited until none is left. */
export class Background {
  private readonly pending = new Set<Promise<unknown>>();
  readonly waitUntil: WaitUntil = (promise) => {
    const p = promise.catch(() => undefined);
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  };
  async settle(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }
}

/** The isolates of one run. */
export interface Isolates {
  /** Each isolate's engine; the last one (index `scenario.isolates`) is the fills', without leases. */
  engines: Engine[];
  deciders: Decider[];
  background: Background;
  /** Each isolate's view of each rule's mode (a switch reaches each one on its own: `mode` operations). */
  modes: Mode[][];
  /** Every isolate hears of an admin change (the change log): leases revoked, cached denials dropped. */
  forget(rule: string, identityHash: string): void;
}

/** Starts `scenario`'s isolates, their keys under `prefix`, reaching Redis through `network`. */
export function startIsolates(scenario: Scenario, network: Network, token: string, prefix: string): Isolates {
  const endpoints = Array.from({ length: scenario.endpoints }, (_, i) => ({
    url: network.endpoint(`e${i}`),
    token,
  }));
  const engineOf = (leases: "on" | "off") =>
    createEngine({
      endpoints,
      prefix,
      timeoutMs: scenario.timeoutMs,
      adminTimeoutMs: 1000,
      cluster: scenario.cluster,
      decider: { log: () => undefined },
      leases,
      ...(leases === "on" && { leaseMs: scenario.leaseMs }),
    });
  const engines = [...Array.from({ length: scenario.isolates }, () => engineOf("on")), engineOf("off")];
  const deciders: Decider[] = engines.map((e) => e.decider);
  return {
    engines,
    deciders,
    background: new Background(),
    modes: deciders.map(() => scenario.rules.map((r) => r.mode ?? "on")),
    forget: (rule, identityHash) => {
      for (const d of deciders) (d as ResilientDecider).forget(rule, identityHash);
    },
  };
}
