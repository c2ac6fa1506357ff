/**
 * The model's verdict on one run's record (docs/exactness.md, "The model"): per (rule, identity) and epoch,
 * what Redis and leases admitted against each algorithm's bound and the ledger of what responses charged
 * (test/sim/model.ts, test/sim/after-response.ts), the penalty box's blocks, the fail-open bound
 * (test/sim/fail-open.ts), and what shed rules promise (test/sim/shed.ts).
 */
import { checkBlocks, checkLedger, checkResponses } from "./after-response";
import { epochsOf } from "./epochs";
import { checkFallbacks } from "./fail-open";
import { type Admission, checkHistory, floorOf, type Violation } from "./model";
import { partsOf, type RunRecord } from "./record";
import { ruleIndex, type Scenario, type SimRule } from "./scenario";
import { checkShed } from "./shed";

/** Every violation of the model in `record`, each named by its (rule, identity). */
export function checkRecord(scenario: Scenario, record: RunRecord): Violation[] {
  const { histories, changes, denials, fallbacks } = record;
  const ruleOf = (key: string) => scenario.rules[ruleIndex(partsOf(key).rule)] as SimRule;
  const violations: Violation[] = [];
  for (const [key, history] of histories) {
    const limits = ruleOf(key);
    // An admin change starts an epoch checked alone, under the limits in force in it (a reset keeps them, an
    // override sets its own, its removal or its ttl's end the rule's); an admission that may lie on either
    // side of a change is left out, and so is an epoch whose limits are unknown (a change a fault cut short).
    for (const epoch of epochsOf(limits, changes.get(key) ?? [], history)) {
      if (epoch.limits === "unknown") continue;
      // A tier's limits hold under the rule's own; an override replaces them (the script reads it).
      const own = epoch.limits === limits;
      const decided = epoch.history.map(
        ({ limits: tier, ...a }): Admission => (own && tier ? { ...a, limits: tier } : a),
      );
      // What each admission certainly holds whatever its response did; and the ledger, with the charges.
      const held = decided.map((a) => ({ ...a, units: floorOf(a) })).filter((a) => a.units > 0);
      const found = [...checkHistory(epoch.limits, held), ...checkLedger(epoch.limits, decided)];
      for (const v of [...found, ...checkResponses(epoch.history)]) {
        violations.push({ ...v, detail: `${key}: ${v.detail}` });
      }
    }
  }
  for (const [key, denied] of denials) {
    const rule = ruleOf(key);
    const enforced = (histories.get(key) ?? []).filter((a) => !a.monitor);
    const lifted = (changes.get(key) ?? []).map((c) => ({ from: c.from, to: c.to }));
    for (const v of checkBlocks(rule.blockMs as number, denied, enforced, lifted)) {
      violations.push({ ...v, detail: `${key}: ${v.detail}` });
    }
  }
  violations.push(...checkFallbacks(scenario, histories, fallbacks, changes));
  violations.push(...checkShed(scenario, record, record.faulty(scenario)));
  return violations;
}
