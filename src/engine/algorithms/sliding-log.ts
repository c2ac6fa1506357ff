/**
 * sliding-log: every unit a member of a sorted set scored by when it was taken (lua/decide/sliding-log.lua);
 * exact. Members are named after the request (or lease) id that took them.
 */
import type { AlgorithmLogic } from "./logic";

export const slidingLog: AlgorithmLogic = {
  // A refund removes members by name, and a reset removed them.
  resetFenceMs: () => 0,
  // The lease's members are the ones recorded up to its end.
  leaseReturnWhenUs: ({ whenUs, lifeMs }) => whenUs + lifeMs * 1000,
  // Only Redis knows how soon enough of its past requests leave the log.
  waitForMore: () => undefined,
  refundNeedsOverride: () => false,
};
