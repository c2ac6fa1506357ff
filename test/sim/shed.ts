/**
 * Priority load shedding in the simulation (docs/algorithms.md, "Priority load shedding"): a `shed` rule's
 * call built as the limiter builds it (the real `shedPlan`: the request's class from its method, a sub-key at
 * random, the class's share of that sub-key), and what a correct system may admit, as the page states it:
 *
 * - a request of a class with share `s` on sub-key `k` is admitted only while fewer than ⌊capacity(k) × s⌋
 *   are in flight there, where capacity(k) is ⌊limit / shards⌋, one more for the first `limit % shards`
 *   sub-keys; a request with no class or an unknown one is of the lowest class (test/sim/checks.ts holds each
 *   sub-key's history to this, as a concurrency budget whose limit is the class's);
 * - never more than `limit` in flight over all sub-keys together;
 * - never shed while its class had room: a request is denied only if at least its class's slots may have been
 *   held on its sub-key when Redis decided (so a class of share 1 is shed only at the sub-key's full capacity).
 *
 * The model computes the limits from the page's words, not from src/middleware/shed.ts.
 */
import type { RuleConfig, ShedConfig } from "../../src/config";
import type { Decision, RuleCall, RuleResult } from "../../src/engine/types";
import type { RequestFacts } from "../../src/identity";
import { shardIdentity, shedPlan } from "../../src/middleware/shed";
import { ruleCall } from "./isolates";
import { checkConcurrency, type Instant, type Limits, type Violation } from "./model";
import { keyOf, partsOf, type RunRecord } from "./record";
import { type Mode, ruleName, type Scenario, type SimCall, type SimRule } from "./scenario";

/** The methods that name a shed rule's classes, highest share first (`priority = "method"`). */
const METHODS = ["PUT", "POST", "GET", "HEAD", "PATCH"] as const;
/** The method of a request of no listed class: it gets the lowest. */
const UNLISTED = "OPTIONS";

/** The `shed` part of a simulated rule's config: classes by method, each share as drawn. */
export function shedConfigOf(rule: SimRule): ShedConfig {
  const shares = rule.shed?.shares ?? [1];
  const classes = Object.fromEntries(shares.map((s, i) => [METHODS[i] as string, s]));
  const lowest = shares.indexOf(Math.min(...shares));
  return {
    priority: "method",
    priorityText: "method",
    classes,
    fallback: METHODS[lowest] as string,
    shards: rule.shed?.shards ?? 1,
  };
}

/** A request's method under a shed rule: its class's (`priority` an index into the shares), or an unlisted one. */
const methodOf = (rule: SimRule, c: SimCall): string =>
  c.priority !== undefined && c.priority < (rule.shed?.shares.length ?? 0)
    ? (METHODS[c.priority] as string)
    : UNLISTED;

/** The identity of sub-key `shard` of identity `n`: a stand-in for its hash, from which the model reads `shard`. */
const subKeyHash = (identity: number, shard: number): string =>
  shardIdentity(`sim-identity-${identity}`, shard).padEnd(22, "_");

/** The sub-key a shed call's identity names. */
export const shardOf = (identityHash: string): number => Number(/#(\d+)/.exec(identityHash)?.[1] ?? 0);

/** A shed rule's call as the limiter plans it (src/middleware/plan.ts): real class, sub-key and share. */
export async function shedCall(
  scenario: Scenario,
  c: SimCall,
  mode: Exclude<Mode, "off">,
): Promise<RuleCall> {
  const rule = scenario.rules[c.rule] as SimRule;
  const config = { shed: shedConfigOf(rule) } as RuleConfig & { shed: ShedConfig };
  // With `priority = "method"` the plan reads nothing of the request but its method.
  const plan = await shedPlan(config, methodOf(rule, c), {} as RequestFacts, rule.limit);
  return {
    ...ruleCall(scenario, c, mode),
    limit: plan.limit,
    burst: plan.limit,
    identityHash: subKeyHash(c.identity, plan.shard),
    priorityClass: plan.priorityClass,
    override: false, // a shed sub-key's limit is the class's share: no override applies
  };
}

/** The model's own limit for a request of `priority` on sub-key `shard`: its class's share of that sub-key. */
export function modelLimit(rule: SimRule, shard: number, priority: number | undefined): number {
  const shares = rule.shed?.shares ?? [1];
  const shards = rule.shed?.shards ?? 1;
  const share =
    priority !== undefined && priority < shares.length ? (shares[priority] as number) : Math.min(...shares);
  const capacity = Math.floor(rule.limit / shards) + (shard < rule.limit % shards ? 1 : 0);
  // The page's ⌊capacity × share⌋, in exact arithmetic: shares are drawn in hundredths.
  return Math.floor((capacity * Math.round(share * 100)) / 100);
}

/** A slot Redis may have held on a sub-key: taken within `at`, given back by `releasedTo` (absent: its lease). */
export interface Holder {
  at: Instant;
  releasedTo?: number;
  op: number;
}

/** A request a shed rule denied (in `on` or, would-deny, in `monitor`), somewhere within `at`. */
export interface Shed {
  at: Instant;
  op: number;
  /** The model's limit for it: its class's share of its sub-key. */
  limit: number;
}

/**
 * The shed rules' promises beyond each class's limit per sub-key (checked with the other histories): never
 * more than `limit` in flight over all sub-keys, and, in a run with no fault (every release's landing known),
 * no request shed while fewer than its class's slots may have been held on its sub-key.
 */
export function checkShed(scenario: Scenario, record: RunRecord, faulty: boolean): Violation[] {
  const out: Violation[] = [];
  scenario.rules.forEach((rule, i) => {
    if (rule.algorithm !== "shed") return;
    const ofRule = (key: string) => partsOf(key).rule === ruleName(i);
    // All sub-keys of each identity together: one budget of `limit`.
    const budgets = new Map<string, Parameters<typeof checkConcurrency>[1][number][]>();
    for (const [key, history] of record.histories) {
      if (!ofRule(key)) continue;
      const identity = partsOf(key).identityHash.replace(/#.*/, "");
      const stripped = history.map(({ limits: _, ...a }) => a);
      budgets.set(identity, [...(budgets.get(identity) ?? []), ...stripped]);
    }
    for (const [identity, history] of budgets) {
      for (const v of checkConcurrency(rule as Limits, history)) {
        out.push({
          ...v,
          invariant: `shed: in flight over all sub-keys <= limit`,
          detail: `${identity}: ${v.detail}`,
        });
      }
    }
    if (faulty) return;
    for (const [key, sheds] of record.sheds) {
      if (!ofRule(key)) continue;
      const holders: Holder[] = [
        ...(record.histories.get(key) ?? []).map((a) => ({
          at: a.at,
          op: a.op,
          ...(a.releasedTo !== undefined && { releasedTo: a.releasedTo }),
        })),
        ...(record.holders.get(key) ?? []),
      ];
      for (const s of sheds) {
        // Held, perhaps, when Redis decided: taken before the denial's latest instant, its release not
        // certainly landed and its lease not certainly over before the denial's earliest.
        const held = holders.filter(
          (h) =>
            h.at.from <= s.at.to &&
            (h.releasedTo === undefined || h.releasedTo >= s.at.from) &&
            h.at.to + rule.periodMs >= s.at.from,
        );
        if (held.length < s.limit) {
          out.push({
            invariant: "shed: a request is shed only when its class's share of its sub-key is in flight",
            detail: `${key}: shed with at most ${held.length} in flight, its class's limit ${s.limit}`,
            ops: [...held.map((h) => h.op), s.op],
          });
        }
      }
    }
  });
  return out;
}

/** The model's limits for a shed rule's result: its class's share of its sub-key; `undefined` for another rule. */
export function shedLimits(scenario: Scenario, r: RuleResult, simCalls: SimCall[]): Limits | undefined {
  const simCall = simCalls.find((c) => ruleName(c.rule) === r.call.rule);
  const rule = simCall && (scenario.rules[simCall.rule] as SimRule);
  if (rule?.algorithm !== "shed") return undefined;
  const limit = modelLimit(rule, shardOf(r.call.identityHash), simCall?.priority);
  return { algorithm: "shed", limit, periodMs: rule.periodMs, burst: limit };
}

/** Notes in `record` each request a shed rule's Redis decision shed, with its model's limit. */
export function noteSheds(
  scenario: Scenario,
  record: RunRecord,
  decision: Decision,
  simCalls: SimCall[],
  op: number,
  at: Instant,
): void {
  for (const r of decision.results) {
    const limits =
      r.source === "redis" && r.outcome === "denied" ? shedLimits(scenario, r, simCalls) : undefined;
    if (!limits) continue;
    record.shed(keyOf(r.call.rule, r.call.identityHash), { at, op, limit: limits.limit });
    record.counts.shed++;
  }
}

/**
 * Notes in `record` the shed slots Redis gave a request another rule denied: each may have been held until its
 * release came back (the caller sets `releasedTo` on the holders returned).
 */
export function noteHolders(
  scenario: Scenario,
  record: RunRecord,
  slots: readonly RuleResult[],
  simCalls: SimCall[],
  op: number,
  at: Instant,
): Holder[] {
  return slots
    .filter((r) => r.source === "redis" && shedLimits(scenario, r, simCalls))
    .map((r) => {
      const holder: Holder = { at, op };
      record.holder(keyOf(r.call.rule, r.call.identityHash), holder);
      return holder;
    });
}
