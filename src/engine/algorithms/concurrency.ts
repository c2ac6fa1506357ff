/**
 * concurrency and shed: one sorted set of the requests in flight, each a member named by its request id and
 * scored by when its slot lease runs out (lua/decide/concurrency.lua; a shed rule is the same slots under
 * the limit of its priority class's share). A slot is released after the response, never refunded, leased or
 * cached: these answers are never asked for.
 */
import type { AlgorithmLogic } from "./logic";

export const concurrency: AlgorithmLogic = {
  // A release removes a member by name, and a reset removed them.
  resetFenceMs: () => 0,
  leaseReturnWhenUs: ({ whenUs }) => whenUs,
  // A slot frees on release, which no clock can predict.
  waitForMore: () => undefined,
  refundNeedsOverride: () => false,
};
