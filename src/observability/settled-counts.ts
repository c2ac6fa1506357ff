/**
 * A request's settlement or give-back in the dashboard's counts (src/observability/settle.ts reports it;
 * docs/settle.md, "Seeing it"): its rules' units in the minute's hash (`<rule>:~reserved`, `~charged`,
 * `~given-back`, and the responses `~settled` to their cost or whose reservation was `~kept`), and each
 * identity's last settlement in the minute's settled hash, which `GET /__floodgate/keys` reads back.
 */
import type { SettledRule, SettleEvent } from "../middleware/settled";
import type { MinuteCounts } from "./minute-counts";

/** Identities per rule whose last settlement one minute keeps between two flushes (the most recent ones). */
export const SETTLED_PER_FLUSH = 100;

/** One settlement as the settled hash stores it, and as {@link parseSettled} reads it back. */
export interface StoredSettlement {
  /** When it was counted, ms (the isolate's clock). */
  atMs: number;
  outcome: SettledRule["outcome"];
  reserved: number;
  applied: number;
  cost?: number;
  remaining?: number;
}

const OUTCOMES: readonly string[] = ["settled", "given-back", "kept", "failed"];

/** Counts `event` into `minute` (synchronous, no I/O). */
export function countSettled(minute: MinuteCounts, event: SettleEvent, nowMs: number): void {
  for (const { result, outcome, reserved, applied, cost, remaining } of event.rules) {
    const { rule, identityHash } = result.call;
    add(minute.counts, `${rule}:~reserved`, reserved);
    if (applied > 0) add(minute.counts, `${rule}:~charged`, applied);
    if (applied < 0) add(minute.counts, `${rule}:~given-back`, -applied);
    if (outcome === "settled") add(minute.counts, `${rule}:~settled`, 1);
    if (outcome === "kept" || outcome === "failed") add(minute.counts, `${rule}:~kept`, 1);
    let last = minute.settled.get(rule);
    if (!last) {
      last = new Map();
      minute.settled.set(rule, last);
    }
    // Most recent last (a Map keeps insertion order): the oldest makes room.
    last.delete(identityHash);
    last.set(identityHash, settledValue({ atMs: nowMs, outcome, reserved, applied, cost, remaining }));
    if (last.size > SETTLED_PER_FLUSH) last.delete(last.keys().next().value as string);
  }
}

/** `<ms>:<outcome>:<reserved>:<applied>:<cost>:<remaining>`, an unknown number as `-`. */
export function settledValue(s: {
  atMs: number;
  outcome: SettledRule["outcome"];
  reserved: number;
  applied: number;
  cost?: number | undefined;
  remaining?: number | undefined;
}): string {
  return `${s.atMs}:${s.outcome}:${s.reserved}:${s.applied}:${s.cost ?? "-"}:${s.remaining ?? "-"}`;
}

/** A stored settlement, or `undefined` for anything else. */
export function parseSettled(value: unknown): StoredSettlement | undefined {
  if (typeof value !== "string") return undefined;
  const [atMs, outcome, reserved, applied, cost, remaining] = value.split(":");
  if (outcome === undefined || !OUTCOMES.includes(outcome)) return undefined;
  const number = (text: string | undefined) =>
    text === undefined || text === "-" ? undefined : Number(text);
  const stored: StoredSettlement = {
    atMs: Number(atMs),
    outcome: outcome as SettledRule["outcome"],
    reserved: Number(reserved),
    applied: Number(applied),
  };
  const c = number(cost);
  const r = number(remaining);
  if (c !== undefined) stored.cost = c;
  if (r !== undefined) stored.remaining = r;
  return [stored.atMs, stored.reserved, stored.applied, c ?? 0, r ?? 0].every(Number.isFinite)
    ? stored
    : undefined;
}

const add = (map: Map<string, number>, key: string, by: number) => map.set(key, (map.get(key) ?? 0) + by);
