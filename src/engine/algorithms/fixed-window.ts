/**
 * fixed-window: one counter per window, windows aligned to the Unix epoch (lua/decide/fixed-window.lua). The
 * counter expires with its window, so the state is "this window's count".
 */
import type { AlgorithmLogic } from "./logic";

export const fixedWindow: AlgorithmLogic = {
  // A refund lands only within the window its `when` falls in.
  resetFenceMs: ({ periodMs }) => periodMs,
  leaseReturnWhenUs: ({ whenUs }) => whenUs,
  // The window's end does not depend on the cost.
  waitForMore: (denied) => denied.retryAfterMs,
  // A counter of the rule's own period may end where the override's did, without having counted them.
  refundNeedsOverride: (periodMs, ownPeriodMs) => periodMs !== ownPeriodMs,
};
