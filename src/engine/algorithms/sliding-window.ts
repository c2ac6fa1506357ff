/**
 * sliding-window: the weighted two-counter estimate (lua/decide/sliding-window.lua): this window's count plus
 * the previous one's, weighted by how much of it still overlaps the sliding period.
 */
import type { AlgorithmLogic } from "./logic";

export const slidingWindow: AlgorithmLogic = {
  // A refund lands only within the window its `when` falls in.
  resetFenceMs: ({ periodMs }) => periodMs,
  leaseReturnWhenUs: ({ whenUs }) => whenUs,
  // Past requests drain as the window slides: only Redis knows how soon enough of them have.
  waitForMore: () => undefined,
  // The script's index of the window tells which counter took them.
  refundNeedsOverride: () => false,
};
