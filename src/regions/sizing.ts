/**
 * How many units a region asks the primary for (docs/regions.md, "How a region decides"): what the region is
 * expected to spend within the lease's longest life, at the pace it showed since its last miss or grant. A
 * (rule, identity) the region has not seen for a while asks for little (units leased and never spent are lost
 * to it: they are not given back), and none under a low limit. The primary grants
 * at most half of what it has left (lua/decide/lease-grant.lua), so two regions asking at once split the
 * remainder and the last units go one by one; a pace only sizes, it never decides.
 */
import type { RuleCall } from "../engine/types";
import type { Pace, SpentPool } from "./pool";

/** The shortest span a pace is measured over, ms: a burst's first ms says little of its rate. */
const MIN_SPAN_MS = 100;

/**
 * Units wanted (cost included) by a request whose region's pool ran short, at `regionNowMs` (the region's
 * clock): the units the pool last got, and the request that got them, spent since `pace`, over the lease's life.
 */
export function wantedOnMiss(
  call: Pick<RuleCall, "cost" | "limit" | "periodMs">,
  pace: Pace | undefined,
  regionNowMs: number,
  lifeMs: number,
): number {
  const { cost } = call;
  // First sight (or not seen for minutes): a quarter of what the limit allows over a lease's life, which is
  // none for a limit too low to spare it.
  if (pace === undefined) return cost + Math.floor((call.limit * lifeMs) / call.periodMs / 4);
  const spanMs = Math.max(regionNowMs - pace.atMs, MIN_SPAN_MS);
  return cost + Math.floor(((pace.units + cost) / spanMs) * lifeMs);
}

/**
 * Units wanted by a renewal (no request: lua/lease.lua's cost 0) of a pool half spent, at the edge's `now`: what
 * the region will spend at its pace from when the pool runs out until the new units' lease ends (a lease's life
 * from now, less the time the pool's `left` units still last). Asking for a whole life's worth would lose about
 * half of every grant at its expiry, and a hot identity would run out of quota it never spent.
 */
export function wantedOnRenewal(pool: SpentPool, now: number, lifeMs: number): number {
  const spanMs = Math.max(now - pool.figures.depositedAt, MIN_SPAN_MS);
  const perMs = (pool.granted - pool.left) / spanMs;
  return Math.max(1, Math.floor(perMs * lifeMs - pool.left));
}
