/**
 * A rule's settlements on the dashboard (a rule that counts by status or settles its cost: docs/settle.md,
 * "Seeing it"): over the last hour, how many responses were settled to their cost and how many kept their
 * reservation, and the units reserved at admission, charged after the response and given back. The counts are
 * the isolates' (src/observability/metrics.ts, `<rule>:~…` fields of each minute's hash).
 */
import type { RuleConfig } from "../config/rule-config";

/** A rule's settlements over the last hour. */
export interface SettlementView {
  /** Responses whose real cost was settled. */
  settled: number;
  /** Responses whose reservation stood (the response did not say its cost, or Redis did not answer). */
  kept: number;
  /** Units reserved at admission, charged after a response, given back after one. */
  reserved: number;
  charged: number;
  givenBack: number;
}

const FIELDS = [
  ["settled", "~settled"],
  ["kept", "~kept"],
  ["reserved", "~reserved"],
  ["charged", "~charged"],
  ["givenBack", "~given-back"],
] as const;

/** The rule's settlements from the minutes' count hashes; `undefined` for a rule that does not settle or count. */
export function settlementView(
  rule: Pick<RuleConfig, "name" | "count" | "settle">,
  perMinute: ReadonlyArray<Record<string, unknown>>,
): SettlementView | undefined {
  if (rule.count === undefined && rule.settle === undefined) return undefined;
  const view: SettlementView = { settled: 0, kept: 0, reserved: 0, charged: 0, givenBack: 0 };
  for (const fields of perMinute) {
    for (const [name, field] of FIELDS) view[name] += Number(fields[`${rule.name}:${field}`] ?? 0) || 0;
  }
  return view;
}

/** The settlement line of a rule's card (its numbers refreshed by the page's script); "" for none. */
export function renderSettlement(view: SettlementView | undefined): string {
  if (view === undefined) return "";
  const n = (name: keyof SettlementView) =>
    `<span data-field="settlement.${name}">${Number(view[name])}</span>`; // numbers only: nothing to escape
  return `<p class="settlement counted">Last hour: ${n("settled")} responses settled to their cost, ${n("kept")} kept their reservation; ${n("reserved")} units reserved, ${n("charged")} charged after the response, ${n("givenBack")} given back.</p>
`;
}
