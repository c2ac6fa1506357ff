/**
 * token-bucket and gcra: one TAT (theoretical arrival time, µs) per identity (lua/decide/token-bucket.lua, BUCKET and
 * GCRA: both algorithms ARE the same state); `burst` is the capacity, refilled one unit per `unitUs`.
 */
import type { AlgorithmLogic, FenceLimits } from "./logic";

/** A bucket's time per unit under `limit` a `periodMs`, µs, as the script counts it: whole µs, rounded up. */
export const unitUs = (limit: number, periodMs: number): number => Math.ceil((periodMs * 1000) / limit);

/** A token bucket's capacity under `limits`, µs, as the script works it out: whole µs per unit. */
export const capacityUs = ({ limit, periodMs, burst }: FenceLimits): number =>
  burst * unitUs(limit, periodMs);

export const tokenBucket: AlgorithmLogic = {
  // The capacity plus the longest lease (a quarter of it) plus the delay: a lease's return lands only while
  // the TAT it wrote lies ahead, a split refund's or give-back's only while the TAT its decision wrote does,
  // and those TATs lay at most so far ahead of their grant or decision. +1: Redis counts a PX from the
  // reset's whole ms, while the TAT counts from its µs.
  resetFenceMs: (limits) => {
    if (limits.limit <= 0) return 0;
    const us = capacityUs(limits);
    return Math.ceil(us / 1000) + Math.floor(us / 4000) + (limits.delayMs ?? 0) + 1;
  },
  // A bucket gives back only while the TAT is still the one the lease wrote.
  leaseReturnWhenUs: ({ tatUs }) => tatUs,
  // It refills them at its rate.
  waitForMore: (denied, units) =>
    denied.retryAfterMs + Math.ceil((units * unitUs(denied.limit, denied.periodMs)) / 1000),
  // A reset after the override ended by its `ttl` fences for the rule's own capacity only, which may be shorter.
  refundNeedsOverride: () => true,
};
