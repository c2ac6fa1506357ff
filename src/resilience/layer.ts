/**
 * A decider stacked on another (leases, regions, async rules: src/resilience/engine.ts builds the stack): what
 * a layer does not decide itself goes to the decider below unchanged. A layer implements `decide` and
 * overrides what it keeps state for (`forget` calls `super.forget` after dropping its own).
 */
import type {
  Decision,
  DecideOptions,
  RefundCall,
  Reservation,
  RuleCall,
  RuleResult,
  SettledUnits,
  Settlement,
} from "../engine/types";
import type { DeciderHealth, ResilientDecider } from "./decider";

/** The decider below a layer: it may tell its endpoints' health apart and count the units leased in it. */
export type InnerDecider = ResilientDecider & {
  endpointHealth?(): DeciderHealth[];
  leasedUnits?(): number;
};

export abstract class DeciderLayer implements ResilientDecider {
  protected readonly inner: InnerDecider;

  constructor(inner: InnerDecider) {
    this.inner = inner;
  }

  abstract decide(calls: RuleCall[], requestId: string, options?: DecideOptions): Promise<Decision>;

  forget(rule: string, identityHash: string): void {
    this.inner.forget(rule, identityHash);
  }

  forgetBlocks(): void {
    this.inner.forgetBlocks();
  }

  release(call: RuleCall, requestId: string, reservation?: Reservation): Promise<void> {
    return this.inner.release(call, requestId, reservation);
  }

  /** Units consumed earlier given back by the decider below (`Decider.refund`). */
  refund(calls: RefundCall[], requestId: string, whenUs: number): Promise<number[]> {
    return this.inner.refund?.(calls, requestId, whenUs) ?? Promise.resolve(calls.map(() => 0));
  }

  /** Costs settled after their responses by the decider below (docs/settle.md). */
  settle(settlements: Settlement[], requestId: string, decidedAtMs: number): Promise<SettledUnits[]> {
    return this.inner.settle?.(settlements, requestId, decidedAtMs) ?? Promise.reject(new Error("no settle"));
  }

  health(): DeciderHealth {
    return this.inner.health();
  }

  /** Each endpoint's health, as the decider below tells them apart (one endpoint: its own). */
  endpointHealth(): DeciderHealth[] {
    return this.inner.endpointHealth?.() ?? [this.inner.health()];
  }

  /** Units the leases below hold unspent (0 without leases). */
  leasedUnits(): number {
    return this.inner.leasedUnits?.() ?? 0;
  }

  cachedDenial(call: RuleCall): RuleResult | undefined {
    return this.inner.cachedDenial(call);
  }

  cachedFigures(call: RuleCall): RuleResult | undefined {
    return this.inner.cachedFigures(call);
  }
}
