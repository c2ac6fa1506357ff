/**
 * Admin changes of one (rule, identity) as the simulator checks around them (docs/exactness.md, "The model"):
 * each change starts an epoch, checked alone under the limits in force in it.
 */
import type { Admission, Limits } from "./model";

/** An admin change of one (rule, identity), somewhere in [from, to]: the limits in force after it. */
export interface Change {
  from: number;
  to: number;
  /** `same`: a reset; `own`: the rule's own again; `unknown`: a change that may or may not have been made. */
  limits: Limits | "same" | "own" | "unknown";
  /** An override's set or removal (not a reset), or the end of the `ttl` of the override set at `ends`. */
  kind: "reset" | "override" | "ttl";
  /** A ttl's end: the override's set whose ttl it is. */
  ends?: Change;
}

/**
 * The changes as they took effect: a ttl's end only if no later set or removal replaced its override before
 * it (one that may have come before or after it leaves the limits unknown), and a change whose interval
 * overlaps another override change's leaves them unknown too (the two may have landed in either order).
 */
export function inEffect(changes: readonly Change[]): Change[] {
  const overrides = changes.filter((c) => c.kind === "override");
  const out: Change[] = [];
  for (const change of changes) {
    if (change.kind === "ttl") {
      const set = change.ends as Change;
      const later = overrides.filter((c) => c !== set && c.to > set.from && c.from < change.to);
      if (later.some((c) => c.to < change.from && c.from > set.to)) continue; // replaced before it ended
      if (later.length > 0) {
        out.push({ ...change, limits: "unknown" });
        continue;
      }
      out.push(change);
      continue;
    }
    const racing =
      change.kind === "override" &&
      overrides.some((c) => c !== change && c.from < change.to && change.from < c.to);
    out.push(racing ? { ...change, limits: "unknown" } : change);
  }
  return out.sort((a, b) => a.from - b.from);
}

/** A stretch of one (rule, identity)'s history between admin changes, checked alone under its limits. */
export interface Epoch {
  limits: Limits | "unknown";
  from: number;
  to: number;
  history: Admission[];
}

/**
 * The epochs the admin `changes` cut a history into, each with the limits in force in it (a reset keeps
 * them, an override sets its own, its removal or its ttl's end brings back `own`). An epoch starts once
 * every change before it has certainly landed: after the latest end of any change so far, not only the last
 * one's, since changes may overlap (a reset slow on its way takes longer than an override's ttl end inside
 * it; in between, either may have landed first). An admission that may lie on either side of a change is
 * left out, and a held request belongs to the epoch its decision and its slot both lie in.
 */
export function epochsOf(own: Limits, changes: readonly Change[], history: readonly Admission[]): Epoch[] {
  let inForce: Limits | "unknown" = own;
  const epochs: Epoch[] = [];
  let start = Number.NEGATIVE_INFINITY;
  for (const cut of inEffect(changes)) {
    epochs.push({ limits: inForce, from: start, to: cut.from, history: [] });
    inForce = cut.limits === "same" ? inForce : cut.limits === "own" ? own : cut.limits;
    start = Math.max(start, cut.to);
  }
  epochs.push({ limits: inForce, from: start, to: Number.POSITIVE_INFINITY, history: [] });
  for (const a of history) {
    epochs
      .find((e) => Math.min(a.at.from, a.decidedFrom ?? a.at.from) >= e.from && a.at.to < e.to)
      ?.history.push(a);
  }
  return epochs;
}
