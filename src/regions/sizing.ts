/**
 * How many units a region asks the primary for (docs/regions.md, "How a region decides"): what the region spent of its
 * last grant, per ms, times the lease's longest life. The primary grants at most half of what it has left
 * (lua/decide/lease-grant.lua), so two regions asking at once split the remainder and the last units go one
 * by one; a pace only sizes, it never decides.
 */
import type { Pace, SpentPool } from "./pool";

/** Units a (rule, identity) new to the region asks beyond its cost: as for three requests in all. */
const FIRST_ASK = 2;

/** The shortest span a pace is measured over, ms: a burst's first ms says little of its rate. */
const MIN_SPAN_MS = 100;

/** Units to ask beyond `cost` for `lifeMs` when `spent` units went in `spanMs`. */
function ask(cost: number, spent: number, spanMs: number, lifeMs: number): number {
  return Math.max(cost, Math.ceil((spent / Math.max(spanMs, MIN_SPAN_MS)) * lifeMs));
}

/**
 * Units wanted (cost included) by a request whose region's pool ran short: a new (rule, identity) asks
 * for a little; one seen before for what the region spent since its last deposit, over the lease's life.
 */
export function wantedOnMiss(cost: number, pace: Pace | undefined, now: number, lifeMs: number): number {
  if (pace === undefined) return cost * (1 + FIRST_ASK);
  return cost + ask(cost, pace.granted, now - pace.depositedAt, lifeMs);
}

/** Units wanted by a renewal (no request: lua/lease.lua's cost 0) of a pool half spent. */
export function wantedOnRenewal(pool: SpentPool, now: number, lifeMs: number): number {
  return ask(1, pool.granted - pool.left, now - pool.figures.depositedAt, lifeMs);
}
