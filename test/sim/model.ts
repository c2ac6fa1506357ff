/**
 * The reference model: what each algorithm may admit, a few lines each, no Redis, and the invariants a
 * simulated history must keep (docs/exactness.md).
 *
 * A history is what the clients saw: per (rule, identity), each admission's units and the instant it was
 * admitted. The simulator cannot know that instant exactly (the script runs somewhere between the call's send
 * and its reply; Redis and the isolates read the same system clock), so every instant is an interval, and a
 * check counts an admission only where it lies whichever point of its interval was the true one. A check
 * therefore never blames the engine for an interleaving that could have been correct: every violation it
 * reports is one no choice of instants explains.
 */

/** An instant known to lie within [from, to], ms on the system clock (Redis's TIME reads the same clock). */
export interface Instant {
  from: number;
  to: number;
}

/** One (rule, identity)'s limits, as a rule call carries them. */
export interface Limits {
  algorithm:
    | "fixed-window"
    | "sliding-window"
    | "sliding-log"
    | "token-bucket"
    | "gcra"
    | "concurrency"
    | "shed";
  limit: number;
  periodMs: number;
  burst: number;
}

/** Units a client was let through with, and when; a concurrency slot also says when it was given back. */
export interface Admission {
  units: number;
  at: Instant;
  /** Concurrency: when the release call went out (absent: never released, held until its slot expires). */
  releasedFrom?: number;
  /** When the release call came back (absent: not yet, or never sent). */
  releasedTo?: number;
  /**
   * A held request (a delay): when its decision was sent, earlier than `at` (its slot). The slot was reserved
   * under the limits in force then; an admin change before the slot does not move it.
   */
  decidedFrom?: number;
  /** Which operation of the run admitted it (for the report). */
  op: number;
  /**
   * The limits this request was decided under when they are not the rule's own: its tier's (a tier changes a
   * window's or a log's limit, or a bucket's burst, per request, sharing the identity's state).
   */
  limits?: Limits;
  /**
   * What its response said, for a rule whose units it moves (test/sim/after-response.ts): whether the rule
   * counts its status (`false`: every unit may go back), and the real cost its body states (a settled rule).
   */
  response?: { counted: boolean; spent?: number };
  /** What the real code then did about it, and when: a give-back by status or a settlement. */
  adjust?: Adjustment;
  /** Counted by the rule in `monitor` mode (it never denies, nor blocks). */
  monitor?: boolean;
}

/**
 * Units a response moved after the admission: given back (< 0: a status the rule does not count, a settled cost
 * below the reservation) or charged (> 0: a settled cost above it), by a call sent and answered within `at`.
 */
export interface Adjustment {
  /** `status`: units given back for a status the rule does not count; `settle`: a settlement. */
  kind: "status" | "settle";
  units: number;
  at: Instant;
  /** What the call said it did (a charge's units; absent: no answer, it may or may not have landed). */
  applied?: number;
}

/**
 * The units an admission certainly holds in Redis from its admission on, by what its response said (never by
 * what the code did about it): none if its rule does not count its status, at most its real cost if it settles;
 * its cost otherwise. A charge may land after anything, so it never adds here.
 */
export const floorOf = (a: Admission): number =>
  a.response === undefined
    ? a.units
    : a.response.counted
      ? Math.min(a.units, a.response.spent ?? a.units)
      : 0;

/** The units an admission holds once its response is settled, by what it said: its real cost, or none. */
export const finalOf = (a: Admission): number =>
  a.response === undefined ? a.units : a.response.counted ? (a.response.spent ?? a.units) : 0;

/** The limit admission `a` was decided under: its tier's, else the rule's. */
const limitOf = (l: Limits, a: Admission): number => a.limits?.limit ?? l.limit;

/** A broken invariant: which, where, and the admissions that break it. */
export interface Violation {
  invariant: string;
  detail: string;
  ops: number[];
}

/** µs per unit of a bucket, as the script counts it: whole µs, rounded up. */
const intervalUs = ({ limit, periodMs }: Limits): number => Math.ceil((periodMs * 1000) / limit);

// ---- The algorithms' admission rules, exactly timed (what one Redis alone would do) -----------------------

/** Fixed window: at most `limit` units per epoch-aligned window of `periodMs`. */
export const fixedWindowAdmits = (l: Limits, countedInWindow: number, cost: number): boolean =>
  countedInWindow + cost <= l.limit;

/** Sliding window: the previous window's count weighted by how much of it is still in view, plus this one's. */
export const slidingWindowAdmits = (l: Limits, prev: number, cur: number, t: number, cost: number): boolean =>
  prev * (1 - (t % l.periodMs) / l.periodMs) + cur + cost <= l.limit + 1e-9;

/** Sliding log: at most `limit` units in any `periodMs` ending now. */
export const slidingLogAdmits = (l: Limits, inLastPeriod: number, cost: number): boolean =>
  inLastPeriod + cost <= l.limit;

/** Token bucket / GCRA: one TAT; `cost` fits when it ends no later than one capacity ahead of now. */
export const bucketAdmits = (l: Limits, tatUs: number, tUs: number, cost: number): boolean =>
  Math.max(tatUs, tUs) + cost * intervalUs(l) <= tUs + l.burst * intervalUs(l);

/** Concurrency: fewer than `limit` slots held now. */
export const concurrencyAdmits = (l: Limits, held: number): boolean => held < l.limit;

// ---- The invariants over a history --------------------------------------------------------------------

const window = (t: number, periodMs: number): number => Math.floor(t / periodMs);

/**
 * At most `limit` units admitted in any window. Admissions certainly inside one window count there; one whose
 * interval straddles an edge counts wholly in one of the two, and the check places them where they fit best:
 * at each edge, as many units to the earlier window as its room takes (the best subset: the earlier window
 * has no later use for its room, the later one only gains), the rest to the later one. So only a history no
 * placement explains fails.
 */
export function checkFixedWindow(l: Limits, history: readonly Admission[]): Violation[] {
  const definite = new Map<number, Admission[]>();
  const straddling = new Map<number, Admission[]>(); // by the window it starts in
  for (const a of history) {
    const from = window(a.at.from, l.periodMs);
    const to = window(a.at.to, l.periodMs);
    if (to - from > 1) continue; // longer than a period: it could be anywhere
    const into = from === to ? definite : straddling;
    into.set(from, [...(into.get(from) ?? []), a]);
  }
  const windows = [...new Set([...definite.keys(), ...straddling.keys()].flatMap((k) => [k, k + 1]))].sort(
    (a, b) => a - b,
  );
  const out: Violation[] = [];
  let carried: Admission[] = [];
  let last = Number.NEGATIVE_INFINITY;
  for (const k of windows) {
    if (k !== last + 1) carried = [];
    last = k;
    const here = [...(definite.get(k) ?? []), ...carried];
    const load = here.reduce((n, a) => n + a.units, 0);
    // Tiers of one window: the largest limit bounds the whole (the ledger checks each admission under its own).
    const w = { ...l, limit: Math.max(l.limit, ...here.map((a) => limitOf(l, a))) };
    if (!fixedWindowAdmits(w, load - (here[0]?.units ?? 0), here[0]?.units ?? 0)) {
      out.push({
        invariant: "fixed-window: units admitted in one window <= limit",
        detail: `window ${k} (${k * l.periodMs}..${(k + 1) * l.periodMs} ms): ${load} units > limit ${w.limit}`,
        ops: here.map((a) => a.op),
      });
    }
    const edge = straddling.get(k) ?? [];
    const room = Math.max(w.limit, ...edge.map((a) => limitOf(l, a))) - load;
    const kept = bestFit(edge, Math.max(0, room));
    carried = edge.filter((a) => !kept.has(a));
  }
  return out;
}

/** The admissions of `items` whose units sum closest to `room` without exceeding it (subset sum). */
function bestFit(items: readonly Admission[], room: number): Set<Admission> {
  const best: (Admission[] | undefined)[] = [[]];
  for (const item of items) {
    for (let sum = room - item.units; sum >= 0; sum--) {
      const base = best[sum];
      if (base !== undefined && best[sum + item.units] === undefined)
        best[sum + item.units] = [...base, item];
    }
  }
  for (let sum = room; sum >= 0; sum--) {
    const found = best[sum];
    if (found) return new Set(found);
  }
  return new Set();
}

/**
 * The sliding window's bound is its estimate, not an exact count: at every admission, the units admitted
 * before it in its window (and its own) plus the previous window's weighted by what is still in view stay
 * within the limit. Counted: what certainly lies in each window and certainly came first; weighted at the
 * latest instant the admission can have had (the smallest weight).
 */
export function checkSlidingWindow(l: Limits, history: readonly Admission[]): Violation[] {
  const out: Violation[] = [];
  const inWindow = (a: Admission, k: number) =>
    window(a.at.from, l.periodMs) === k && window(a.at.to, l.periodMs) === k;
  for (const a of history) {
    const k = window(a.at.from, l.periodMs);
    if (!inWindow(a, k)) continue;
    const before = history.filter((b) => b !== a && inWindow(b, k) && b.at.to < a.at.from);
    const prevOnes = history.filter((b) => inWindow(b, k - 1));
    const cur = before.reduce((n, b) => n + b.units, 0);
    const prev = prevOnes.reduce((n, b) => n + b.units, 0);
    const t = a.at.to;
    if (!slidingWindowAdmits({ ...l, limit: limitOf(l, a) }, prev, cur, t, a.units)) {
      out.push({
        invariant: "sliding-window: estimate (previous window weighted + this window) <= limit",
        detail: `at ${t} ms: prev ${prev} weighted ${(1 - (t % l.periodMs) / l.periodMs).toFixed(4)} + cur ${cur} + ${a.units} > limit ${limitOf(l, a)}`,
        ops: [...prevOnes.map((b) => b.op), ...before.map((b) => b.op), a.op],
      });
    }
  }
  return out;
}

/** At most `limit` units admitted in any `periodMs`: counted, the admissions certainly within one. */
export function checkSlidingLog(l: Limits, history: readonly Admission[]): Violation[] {
  const out: Violation[] = [];
  for (const a of history) {
    // Certainly within (T - period, T] for a's true instant T.
    const inside = history.filter(
      (b) => b === a || (b.at.to <= a.at.from && b.at.from > a.at.to - l.periodMs),
    );
    const units = inside.reduce((n, b) => n + b.units, 0);
    if (!slidingLogAdmits({ ...l, limit: limitOf(l, a) }, units - a.units, a.units)) {
      out.push({
        invariant: "sliding-log: units admitted in any period <= limit",
        detail: `${units} units > limit ${limitOf(l, a)} within ${l.periodMs} ms ending ${a.at.from}..${a.at.to}`,
        ops: inside.map((b) => b.op),
      });
    }
  }
  return out;
}

/**
 * Token bucket / GCRA: in any interval of length L, at most burst + L / interval units (the bucket starts at
 * most full and refills one unit per interval). Counted, for every pair of admissions, those certainly between
 * the first one's earliest and the last one's latest instant; `maxSpanMs`: only intervals up to that long (a
 * bound stated per period, as the fail-open one).
 */
export function checkBucket(
  l: Limits,
  history: readonly Admission[],
  maxSpanMs = Number.POSITIVE_INFINITY,
): Violation[] {
  const out: Violation[] = [];
  const sorted = [...history].sort((a, b) => a.at.from - b.at.from);
  const iUs = intervalUs(l);
  for (let i = 0; i < sorted.length; i++) {
    const first = sorted[i] as Admission;
    for (let j = i; j < sorted.length; j++) {
      const last = sorted[j] as Admission;
      if (last.at.to < first.at.from) continue;
      if (last.at.to - first.at.from > maxSpanMs) continue;
      const inside = sorted.filter((b) => b.at.from >= first.at.from && b.at.to <= last.at.to);
      if (inside.length === 0) continue;
      const units = inside.reduce((n, b) => n + b.units, 0);
      const spanUs = (last.at.to - first.at.from) * 1000;
      // Tiers of one bucket (the same rate, bursts of their own): a TAT written under the largest capacity among
      // them may stand that far ahead of its admission's instant.
      const burst = Math.max(...inside.map((b) => b.limits?.burst ?? l.burst));
      const bound = burst + spanUs / iUs;
      if (units > bound + 1e-9) {
        out.push({
          invariant: "bucket: units admitted in any interval L <= burst + L / interval",
          detail: `${units} units in ${(spanUs / 1000).toFixed(1)} ms > ${bound.toFixed(2)} (burst ${burst}, ${iUs} µs/unit)`,
          ops: inside.map((b) => b.op),
        });
        return out; // one is enough: the shrinker does the rest
      }
    }
  }
  return out;
}

/**
 * Concurrency: at every admission, fewer than `limit` other slots certainly held: admitted before it, not yet
 * released when it was, and not yet expired (a slot lasts `periodMs` from its admission).
 */
export function checkConcurrency(l: Limits, history: readonly Admission[]): Violation[] {
  const out: Violation[] = [];
  for (const a of history) {
    const held = history.filter(
      (b) =>
        b !== a &&
        b.at.to <= a.at.from &&
        (b.releasedFrom === undefined || b.releasedFrom > a.at.to) &&
        b.at.from + l.periodMs > a.at.to,
    );
    if (!concurrencyAdmits({ ...l, limit: limitOf(l, a) }, held.length)) {
      out.push({
        invariant: "concurrency: slots held at once <= limit",
        detail: `${held.length + 1} slots held > limit ${limitOf(l, a)}`,
        ops: [...held.map((b) => b.op), a.op],
      });
    }
  }
  return out;
}

/** Every invariant of one (rule, identity)'s history under `limits`. */
export function checkHistory(l: Limits, history: readonly Admission[]): Violation[] {
  switch (l.algorithm) {
    case "fixed-window":
      return checkFixedWindow(l, history);
    case "sliding-window":
      return checkSlidingWindow(l, history);
    case "sliding-log":
      return checkSlidingLog(l, history);
    case "token-bucket":
    case "gcra":
      return checkBucket(l, history);
    case "concurrency":
      return checkConcurrency(l, history);
    case "shed": // each admission under its class's limit of its sub-key (test/sim/shed.ts)
      return checkConcurrency(l, history).map((v) => ({
        ...v,
        invariant: "shed: a class is admitted only while fewer than its share of its sub-key are in flight",
      }));
  }
}
