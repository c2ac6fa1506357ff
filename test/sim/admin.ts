/**
 * A scenario's admin operations, through the real code: a reset (the fence, as `DELETE /keys/…` raises it) and
 * an override's set or removal (the real admin app: fence, write, re-aim). Every isolate hears of each (the
 * change log), and the record notes when it may have landed and the limits in force after it.
 */
import { createAdminApp } from "../../src/admin/app";
import { adminContextOf } from "../../src/admin/context";
import { raiseFence } from "../../src/admin/fence";
import type { RuleConfig } from "../../src/config/rule-config";
import { traitsOf } from "../../src/engine/algorithms";
import { resetFenceMs, stateKey } from "../../src/engine/keys";
import type { Engine } from "../../src/resilience/engine";
import type { Change } from "./epochs";
import type { Isolates } from "./isolates";
import type { Limits } from "./model";
import { keyOf, type RunRecord } from "./record";
import { identityOf, ruleName, type Scenario, type SimOverride, type SimRule } from "./scenario";
import { shedConfigOf } from "./shed";

const ADMIN_TOKEN = "simulation-admin-token-0123456789abcdef";

/** The rule as the admin API knows it (built directly: the config's schema refuses periods under a second). */
export const ruleConfig = (r: SimRule, i: number): RuleConfig => ({
  name: ruleName(i),
  match: {},
  key: [{ kind: "ip" }],
  keyText: "ip",
  algorithm: r.algorithm,
  limit: r.limit,
  periodMs: r.periodMs,
  burst: r.burst,
  delayMs: r.delayMs,
  cost: { kind: "units", units: 1 },
  tiers: {},
  missing: "ip",
  lease: true,
  ...(r.algorithm === "shed" && { shed: shedConfigOf(r) }),
});

/** The admin operations of one run, through isolate 0's engine. */
export function adminOf(scenario: Scenario, isolates: Isolates, record: RunRecord, prefix: string) {
  const engine = isolates.engines[0] as Engine;
  const executionContext = {
    waitUntil: isolates.background.waitUntil,
    passThroughOnException: () => undefined,
    props: {},
  } as unknown as Parameters<ReturnType<typeof createAdminApp>["fetch"]>[2];
  const admin = createAdminApp(() =>
    adminContextOf({
      config: {
        rules: scenario.rules.map(ruleConfig),
        prefix,
        adminToken: ADMIN_TOKEN,
        mode: "on",
        failure: "closed",
        timeoutMs: scenario.timeoutMs,
        clientIpHeader: "cf-connecting-ip",
      },
      stores: engine.stores,
      shardOf: engine.shardOf,
      decider: engine.decider,
      adminTimeoutMs: 1000,
    }),
  );

  async function reset(rule: number, identity: number) {
    record.counts.operations++;
    const r = scenario.rules[rule] as SimRule;
    const identityHash = identityOf(identity);
    const from = Date.now();
    const ms = resetFenceMs(r.algorithm, [r]);
    await raiseFence(
      { prefix, rule: ruleName(rule), identityHash },
      ms,
      engine.storeOf(identityHash).redis,
      undefined,
      {
        stateKeys: [stateKey(prefix, ruleName(rule), identityHash)],
        bucket: traitsOf(r.algorithm).shape === "bucket",
      },
    ).catch(() => undefined);
    isolates.forget(ruleName(rule), identityHash);
    record.change(keyOf(ruleName(rule), identityHash), {
      from,
      to: Date.now() + 1,
      limits: "same",
      kind: "reset",
    });
  }

  async function override(rule: number, identity: number, set: SimOverride | undefined) {
    record.counts.operations++;
    const r = scenario.rules[rule] as SimRule;
    const identityHash = identityOf(identity);
    const from = Date.now();
    const body = set && {
      limit: set.limit,
      ...(set.periodS !== undefined && { period: set.periodS }),
      ...(set.burst !== undefined && { burst: set.burst }),
      ...(set.ttlS !== undefined && { ttl: set.ttlS }),
    };
    const response = await Promise.resolve(
      admin.fetch(
        new Request(`http://sim.test/overrides/${ruleName(rule)}/hash:${identityHash}`, {
          method: set ? "PUT" : "DELETE",
          headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, "Content-Type": "application/json" },
          ...(body && { body: JSON.stringify(body) }),
        }),
        {},
        executionContext,
      ),
    ).catch(() => undefined);
    isolates.forget(ruleName(rule), identityHash);
    const to = Date.now() + 1;
    const key = keyOf(ruleName(rule), identityHash);
    const limits: Limits | "own" = set
      ? {
          algorithm: r.algorithm,
          limit: set.limit,
          periodMs: set.periodS !== undefined ? set.periodS * 1000 : r.periodMs,
          burst: set.burst ?? set.limit,
        }
      : "own";
    // A change that failed (a fault on its way) may or may not have been written: its limits are unknown.
    const change: Change = { from, to, limits: response?.ok ? limits : "unknown", kind: "override" };
    record.change(key, change);
    if (set?.ttlS !== undefined && response?.ok) {
      const ttlMs = set.ttlS * 1000;
      record.change(key, { from: from + ttlMs, to: to + ttlMs, limits: "own", kind: "ttl", ends: change });
    }
  }

  return { reset, override };
}
