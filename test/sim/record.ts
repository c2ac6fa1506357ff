/**
 * What one run saw, as the model needs it (test/sim/checks.ts): per (rule, identity), what clients were let
 * through (from Redis or leases, and from fail-open fallbacks apart), each admin change, each denial a
 * penalty box may have started from; and what the run did, counted for its report.
 */
import type { Denial } from "./after-response";
import type { Change } from "./epochs";
import type { FellBack } from "./fail-open";
import type { Admission } from "./model";
import type { Counts } from "./scenario";

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
}
