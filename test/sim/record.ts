/**
 * What one run saw, as the model needs it (test/sim/checks.ts): per (rule, identity), what clients were let
 * through (from Redis or leases, and from fail-open fallbacks apart), each admin change, each denial a
 * penalty box may have started from; and what the run did, counted for its report.
 */
import type { Denial } from "./after-response";
import type { Change } from "./epochs";
import type { FellBack } from "./fail-open";
import type { Admission } from "./model";
import type { Counts, Scenario } from "./scenario";
import type { Holder, Shed } from "./shed";

/** The key the record files a (rule, identity) under: `<rule name> <identity hash>`. */
export const keyOf = (rule: string, identityHash: string): string => `${rule} ${identityHash}`;

/** A key's rule name and identity hash. */
export function partsOf(key: string): { rule: string; identityHash: string } {
  const [rule = "", identityHash = ""] = key.split(" ");
  return { rule, identityHash };
}

const push = <T>(map: Map<string, T[]>, key: string, item: T) =>
  map.set(key, [...(map.get(key) ?? []), item]);

export class RunRecord {
  /** Per (rule, identity): what Redis and leases admitted. */
  readonly histories = new Map<string, Admission[]>();
  /** Per (rule, identity): each admin change (reset, override set or removal, an override's ttl ending). */
  readonly changes = new Map<string, Change[]>();
  /** Per (rule, identity): what fail-open rules let through on the fallback limiter's word, by isolate. */
  readonly fallbacks = new Map<string, FellBack[]>();
  /** Per (rule, identity) of a rule with a `block`: its denials in mode `on`, and decisions that may have been. */
  readonly denials = new Map<string, Denial[]>();
  /** Per (shed rule, sub-key): the requests it shed, and slots it gave requests another rule denied. */
  readonly sheds = new Map<string, Shed[]>();
  readonly holders = new Map<string, Holder[]>();
  readonly counts: Counts = {
    operations: 0,
    admitted: 0,
    fromLeases: 0,
    shortSpends: 0,
    delayed: 0,
    givenBack: 0,
    fellBack: 0,
    monitored: 0,
    uncounted: 0,
    settled: 0,
    blocked: 0,
    shed: 0,
    refused: 0,
    exempted: 0,
  };
  /** Decisions Redis did not answer in time (the call may still have counted: its lease grant is lost with it). */
  degraded = 0;

  admission(key: string, a: Admission): void {
    push(this.histories, key, a);
  }
  fellBack(key: string, a: FellBack): void {
    push(this.fallbacks, key, a);
  }
  change(key: string, c: Change): void {
    push(this.changes, key, c);
  }
  denial(key: string, d: Denial): void {
    push(this.denials, key, d);
  }
  shed(key: string, s: Shed): void {
    push(this.sheds, key, s);
  }
  holder(key: string, h: Holder): void {
    push(this.holders, key, h);
  }
  /**
   * Whether units or slots may have been lost or kept on the way: a fault, or a decision Redis did not answer
   * in time (a grant whose reply was lost, a release that never landed).
   */
  faulty(scenario: Scenario): boolean {
    return (
      this.degraded > 0 ||
      scenario.ops.some(
        (o) =>
          o.kind === "fault" || (o.kind === "request" && o.fault) || (o.kind === "burst" && o.after?.fault),
      )
    );
  }
}
