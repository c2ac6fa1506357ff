/**
 * The regional simulator's checks (docs/exactness.md, "Regional pools"): each (rule, identity)'s admissions, from
 * every region's pools and the primary together, against the reference model (test/sim/model.ts), epoch by epoch
 * around the admin changes made in the run.
 */
import { type Change, epochsOf } from "./epochs";
import { type Admission, checkHistory, type Violation } from "./model";
import { dropsOf } from "./regions-drops";
import type { RegionRule } from "./regions-types";

/** An admin change as it was made: the change the model cuts epochs at is known once its drops have landed. */
export interface Made {
  key: string;
  from: number;
  /** When the admin call answered. */
  answeredAt: number;
  ok: boolean;
  limits: Change["limits"];
  kind: "reset" | "override";
  ttlMs?: number;
}

/**
 * The violations of `histories` (per `<rule> <identity hash>`), and how many changes were left with the epoch
 * after them unchecked. An admin change lies between its call's start and the landing, in every one of
 * `regions`, of the first drop of the identity's pools that followed it (docs/regions.md: what a region may still
 * spend until then is the window the docs state); one whose drops never all landed ends never. A change that
 * failed may or may not have been made: its limits are unknown.
 */
export function checkRegions(
  rules: readonly RegionRule[],
  regions: readonly string[],
  made: readonly Made[],
  histories: ReadonlyMap<string, Admission[]>,
): { violations: Violation[]; unchecked: number } {
  const changes = new Map<string, Change[]>();
  let unchecked = 0;
  for (const m of made) {
    const [rule = "", identityHash = ""] = m.key.split(" ");
    const landed = dropsOf(regions, rule, identityHash, m.from);
    if (landed === undefined) unchecked++;
    const to = Math.max(m.answeredAt, landed ?? Number.POSITIVE_INFINITY) + 1;
    const c: Change = { from: m.from, to, limits: m.ok ? m.limits : "unknown", kind: m.kind };
    const list = [...(changes.get(m.key) ?? []), c];
    if (m.ttlMs !== undefined && m.ok) {
      list.push({ from: m.from + m.ttlMs, to: to + m.ttlMs, limits: "own", kind: "ttl", ends: c });
    }
    changes.set(m.key, list);
  }
  const violations: Violation[] = [];
  for (const [key, history] of histories) {
    const rule = rules[Number(key.split(" ")[0]?.slice(1))] as RegionRule;
    for (const epoch of epochsOf(rule, changes.get(key) ?? [], history)) {
      if (epoch.limits === "unknown") continue;
      for (const v of checkHistory(epoch.limits, epoch.history)) {
        violations.push({ ...v, detail: `${key}: ${v.detail}` });
      }
    }
  }
  return { violations, unchecked };
}
