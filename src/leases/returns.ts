/**
 * What a lease did not spend goes back to Redis after its expiry (lua/refund.lua), in the
 * background, sent by the isolate's next request (any identity): no timer keeps a finished request alive
 * for it. docs/leases.md.
 */

import { traitsOf } from "../engine/algorithms";
import { refundOf } from "../engine/results";
import type { RefundCall, WaitUntil } from "../engine/types";
import type { Lease } from "./lease";
import type { LeaseTable } from "./table";

/** Gives back units consumed earlier (`Store.refund` in src/engine/store.ts). */
export type Refund = (calls: RefundCall[], leaseId: string, whenUs: number) => Promise<number[]>;

/** How often a request looks for expired leases to return, ms. */
const SWEEP_INTERVAL_MS = 100;

/**
 * An expired lease found later than this (an isolate idle since) returns nothing: an admin reset's fence
 * stands at most RESET_FENCE_MAX_MS (src/engine/keys.ts), and a return must never reach a state reset after
 * its grant. (A shorter fence, for a short period, is covered by the script itself: docs/script.md,
 * "Why a reset's fence may be short".) Only under-admits, and only for leases nobody here was asking
 * for.
 */
const LATEST_RETURN_MS = 15_000;

/**
 * The sweep of `table`'s expired leases: call it with each request's clock and `waitUntil`; it looks at
 * most every `SWEEP_INTERVAL_MS`. `refund` absent = units only expire. `forget(rule, identityHash)` runs
 * once units are back: a denial cached here may have turned wrong.
 */
export function createSweep(
  table: LeaseTable,
  refund: Refund | undefined,
  forget: (rule: string, identityHash: string) => void,
): (at: number, waitUntil: WaitUntil | undefined) => void {
  let nextSweepAt = 0;

  function returnUnspent(lease: Lease, waitUntil: WaitUntil | undefined): void {
    const units = lease.left;
    lease.left = 0;
    if (units <= 0 || !refund || !waitUntil) return;
    const { rule, identityHash } = lease.call;
    const returned = refund([refundOf(lease.result, units)], lease.leaseId, whenOf(lease));
    waitUntil(returned.then(([n]) => n && forget(rule, identityHash)).catch(() => undefined));
  }

  return (at, waitUntil) => {
    if (at < nextSweepAt) return;
    nextSweepAt = at + SWEEP_INTERVAL_MS;
    for (const lease of table.expired(at)) {
      if (at - lease.expiresAt <= LATEST_RETURN_MS) returnUnspent(lease, waitUntil);
    }
  };
}

/** The refund's `when` (docs/script.md, "Returned units"), as the algorithm's module says. */
const whenOf = (lease: Lease): number => traitsOf(lease.call.algorithm).logic.leaseReturnWhenUs(lease.grant);
