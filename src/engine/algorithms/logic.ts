/**
 * What an algorithm's own TypeScript module (one per algorithm, beside this file) works out where the edge
 * needs more than the table's data (src/engine/algorithms.ts): each function is that algorithm's answer to
 * one question a consumer asks, so that no consumer asks for the algorithm's name. The limiting itself is in
 * the script (lua/); these only price what the script already decided. Types here are structural, so that a
 * module depends on nothing but this file.
 */

/** One set of limits units may have been taken under (a rule's own, a tier's, an override's). */
export interface FenceLimits {
  limit: number;
  periodMs: number;
  burst: number;
  /** A token-bucket/GCRA rule's `delay`, ms: how long it may hold a request. */
  delayMs?: number | undefined;
}

/** The figures of one denial (a `RuleResult`'s), ms. */
export interface DeniedFigures {
  limit: number;
  periodMs: number;
  retryAfterMs: number;
  resetAfterMs: number;
}

/** When and how a lease was granted (a `LeaseGrant`'s). */
export interface GrantTimes {
  /** Redis's clock at the grant, µs. */
  whenUs: number;
  /** How long the units may be spent, ms. */
  lifeMs: number;
  /** A bucket's TAT the grant wrote, µs; otherwise 0. */
  tatUs: number;
}

/** An algorithm's answers to the questions its data in the table cannot answer. */
export interface AlgorithmLogic {
  /**
   * How long an admin reset's fence must stand, ms, for state whose units may have been taken under `limits`
   * (uncapped: src/engine/keys.ts's `resetFenceMs` caps it); 0 = no fence needed. docs/script.md,
   * "Why a reset's fence may be short", shows why each is enough.
   */
  resetFenceMs(limits: FenceLimits): number;
  /** The `when` of the refund of a lease's unspent units, µs (docs/script.md, "Returned units"). */
  leaseReturnWhenUs(grant: GrantTimes): number;
  /**
   * The wait of a request costing `units` (> 0) more than the one `denied` answered, ms, exactly; `undefined`
   * when only Redis knows (past requests that drain): then the edge uses a bound, the full reset, and the deny
   * cache asks Redis rather than answer with a 429 that may be too long.
   */
  waitForMore(denied: DeniedFigures, units: number): number | undefined;
  /**
   * Whether units taken under an override whose period was `periodMs` (the rule's own: `ownPeriodMs`) may go
   * back only while that override is still in force: where the override's end changes which state counted
   * them (src/engine/results.ts's `refundOf`).
   */
  refundNeedsOverride(periodMs: number, ownPeriodMs: number): boolean;
}
