/**
 * What a correct system may admit once responses move units (docs/exactness.md, "The model"): a rule counting by
 * status gives back the units of a request whose status it does not count (docs/counting.md); a settled rule
 * charges or gives back the difference between the real cost and the reservation, and an identity a charge
 * pushed past its limit is in debt, denied until it is repaid (docs/settle.md); a rule with a `block` keeps an
 * identity it denied denied for the block (docs/protect.md, "Penalty box"). Like the other checks, each counts
 * only what certainly happened before an admission: a give-back whenever it may have landed, a charge only once
 * it certainly had, so a violation is one no timing of the calls explains.
 */
import { type Admission, finalOf, floorOf, type Instant, type Limits, type Violation } from "./model";

const window = (t: number, periodMs: number): number => Math.floor(t / periodMs);

/** Whether `x` certainly ended before `y` began. */
const before = (x: Instant, y: Instant): boolean => x.to < y.from;

/**
 * What a settlement certainly charged: the real cost beyond the reservation, as the body stated it, once the
 * charge's call said it applied (0 while it was not answered: it may never have landed).
 */
const charged = (a: Admission): number =>
  a.adjust?.kind === "settle" && a.adjust.units > 0
    ? Math.max(0, Math.min(finalOf(a) - a.units, a.adjust.applied ?? 0))
    : 0;

/**
 * What the code did about each response is what the response said: units go back for a status only when the
 * rule does not count it, and a settlement moves the real cost the body stated less the reservation.
 */
export function checkResponses(history: readonly Admission[]): Violation[] {
  const out: Violation[] = [];
  for (const a of history) {
    const { adjust, response } = a;
    if (adjust === undefined) continue;
    if (adjust.kind === "status" && response?.counted !== false) {
      out.push({
        invariant: "response: units go back only for a status the rule does not count",
        detail: `${-adjust.units} units given back for a counted status`,
        ops: [a.op],
      });
    } else if (adjust.kind === "settle" && adjust.units !== finalOf(a) - a.units) {
      out.push({
        invariant: "response: a settlement moves the real cost the body states less the reservation",
        detail: `settled ${adjust.units}, the body said ${response?.spent} for a reservation of ${a.units}`,
        ops: [a.op],
      });
    }
  }
  return out;
}

/**
 * The ledger at every admission: what Redis certainly held for the identity then (each earlier admission's
 * floor, and the charges that certainly landed before it) plus its own cost, within the limit it was decided
 * under. A fixed window counts what lies in its own window, a charge in the window it landed in (docs/settle.md,
 * "Debt"); a bucket, in any interval, at most its capacity and the refill (of tiers, the largest capacity
 * among the interval's admissions: a TAT written under it may stand that far ahead). The check that a debt denies until it is repaid.
 */
export function checkLedger(l: Limits, history: readonly Admission[]): Violation[] {
  if (l.algorithm === "fixed-window") return fixedWindowLedger(l, history);
  if (l.algorithm === "token-bucket" || l.algorithm === "gcra") return bucketLedger(l, history);
  return [];
}

function fixedWindowLedger(l: Limits, history: readonly Admission[]): Violation[] {
  const out: Violation[] = [];
  const inWindow = (x: Instant, k: number) =>
    window(x.from, l.periodMs) === k && window(x.to, l.periodMs) === k;
  for (const a of history) {
    const k = window(a.at.from, l.periodMs);
    if (!inWindow(a.at, k)) continue;
    const earlier = history.filter((b) => b !== a && inWindow(b.at, k) && before(b.at, a.at));
    const charges = history.filter(
      (b) =>
        charged(b) > 0 &&
        inWindow((b.adjust as { at: Instant }).at, k) &&
        before(b.adjust?.at as Instant, a.at),
    );
    const held = earlier.reduce((n, b) => n + floorOf(b), 0) + charges.reduce((n, b) => n + charged(b), 0);
    const limit = a.limits?.limit ?? l.limit;
    if (held + a.units > limit) {
      out.push({
        invariant: "ledger: what Redis certainly held + cost <= limit (a debt denies until repaid)",
        detail: `window ${k}: held ${held} (charged after the response: ${charges.reduce((n, b) => n + charged(b), 0)}) + ${a.units} > limit ${limit}`,
        ops: [...earlier.map((b) => b.op), ...charges.map((b) => b.op), a.op],
      });
    }
  }
  return out;
}

function bucketLedger(l: Limits, history: readonly Admission[]): Violation[] {
  const iUs = Math.ceil((l.periodMs * 1000) / l.limit);
  const sorted = [...history].sort((a, b) => a.at.from - b.at.from);
  for (const first of sorted) {
    for (const last of sorted) {
      if (last.at.to < first.at.from) continue;
      const span = { from: first.at.from, to: last.at.to };
      const inside = sorted.filter((b) => b.at.from >= span.from && b.at.to <= span.to);
      if (inside.length === 0) continue;
      // Charges that certainly landed after the first admission and before the last was decided: each moved
      // the TAT the last was decided against. A held request's slot was reserved when it was decided; a charge
      // landing between that and the slot pushes the TAT beyond the slot, which no admission test saw.
      const decided = last.decidedFrom ?? last.at.from;
      const charges = sorted.filter((b) => {
        const c = b.adjust?.at;
        return charged(b) > 0 && c !== undefined && c.from > first.at.to && c.to < decided;
      });
      const units = inside.reduce((n, b) => n + floorOf(b), 0) + charges.reduce((n, b) => n + charged(b), 0);
      const spanUs = (span.to - span.from) * 1000;
      const burst = Math.max(...inside.map((b) => b.limits?.burst ?? l.burst)); // tiers: the largest
      const bound = burst + spanUs / iUs;
      if (units > bound + 1e-9) {
        return [
          {
            invariant: "ledger: bucket units + charges landed in any interval L <= burst + L / interval",
            detail: `${units} units (charged after the response: ${charges.reduce((n, b) => n + charged(b), 0)}) in ${(spanUs / 1000).toFixed(1)} ms > ${bound.toFixed(2)} (burst ${burst}, ${iUs} µs/unit)`,
            ops: [...inside.map((b) => b.op), ...charges.map((b) => b.op)],
          },
        ];
      }
    }
  }
  return [];
}

/**
 * A denial by a rule with a `block` in mode `on`, decided by Redis somewhere within `at`; `certain: false` for a
 * decision that may have been one (Redis did not answer in time, or denied a cost above the capacity): it may
 * have started a block too.
 */
export interface Denial {
  at: Instant;
  op: number;
  certain: boolean;
}

/**
 * The penalty box: a denial that certainly came after every block any other denial may have started had ended
 * starts one (denials during a block do not extend it), and no request the rule admitted in mode `on` was
 * certainly decided inside it: after the denial's latest instant, before its earliest plus `blockMs`. `lifted`: when an
 * admin change (a reset, an override) may have lifted a block; a block is not checked past one.
 */
export function checkBlocks(
  blockMs: number,
  denials: readonly Denial[],
  history: readonly Admission[],
  lifted: readonly Instant[] = [],
): Violation[] {
  const out: Violation[] = [];
  const starts = denials.filter(
    (d) =>
      d.certain && denials.every((c) => c === d || c.at.from >= d.at.to || d.at.from >= c.at.to + blockMs),
  );
  for (const s of starts) {
    const until = Math.min(s.at.from + blockMs, ...lifted.filter((c) => c.to > s.at.from).map((c) => c.from));
    for (const a of history) {
      // A held request (a delay) was decided when it was sent, and passes at its slot whatever came between.
      if ((a.decidedFrom ?? a.at.from) > s.at.to && a.at.to < until) {
        out.push({
          invariant: "penalty box: nothing admitted during a block",
          detail: `admitted at ${a.at.from}..${a.at.to} ms, inside the block from the denial at ${s.at.from}..${s.at.to} ms (${blockMs} ms)`,
          ops: [s.op, a.op],
        });
      }
    }
  }
  return out;
}
