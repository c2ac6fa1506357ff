/**
 * sliding-log: one member of a sorted set per request, scored by when it was taken and holding its units, and
 * a running total (lua/decide/sliding-log.lua); exact. Members are named after the request (or lease) id that
 * took them.
 */
import type { AlgorithmLogic } from "./logic";

/**
 * The most requests one sliding-log window may hold: a decision may read every member (those that left the
 * window since the last write; those a denial waits for), so this bounds its Redis time (docs/script.md,
 * "Worst-case Redis time per script call").
 */
export const MAX_LOG_REQUESTS = 10_000;

export const slidingLog: AlgorithmLogic = {
  // A refund removes members by name, and a reset removed them.
  resetFenceMs: () => 0,
  // The lease's members are the ones recorded up to its end.
  leaseReturnWhenUs: ({ whenUs, lifeMs }) => whenUs + lifeMs * 1000,
  // Only Redis knows how soon enough of its past requests leave the log.
  waitForMore: () => undefined,
  refundNeedsOverride: () => false,
};
