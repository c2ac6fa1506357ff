/**
 * What a scenario is (test/sim/system.ts runs one; test/sim/scenarios.ts draws them at random; test/sim/corpus.ts
 * keeps some): its rules, its isolates and endpoints, and its operations, each at a time after the run's start.
 * And how the simulation names a rule and an identity, and the limits a call is decided under.
 */
import type { Limits, Violation } from "./model";
import type { Fault } from "./network";

/** What a response says: its status, and the real cost its body states. */
export interface Answer {
  status: number;
  spent: number;
}

/** One rule of a scenario. */
export interface SimRule extends Limits {
  /** Token-bucket/GCRA: the longest hold, ms; 0 = deny. */
  delayMs: number;
  /** The mode every isolate starts in (a `mode` operation switches it). @default "on" */
  mode?: Mode | undefined;
  /**
   * `open`: a decision Redis cannot give in time goes to the isolate's fallback limiter, whose admissions are
   * checked against the bound docs/fail-open.md states. @default "closed"
   */
  failure?: "open" | "closed" | undefined;
  /** Counts by status (`count = { status = ["4xx"] }`): a request whose status it does not count gives back. */
  count?: boolean | undefined;
  /** Settles the real cost from the response (`settle = "sse:usage.total_tokens"`). */
  settle?: boolean | undefined;
  /** The penalty box (`block`), ms. */
  blockMs?: number | undefined;
  /**
   * A `shed` rule's priority classes, each share in hundredths (index 0 the highest), and the sub-keys its
   * budget is split over (test/sim/shed.ts).
   */
  shed?: { shares: number[]; shards: number } | undefined;
  /** Tiers: a window's or a log's own limit, a bucket's own burst (a call's `tier` picks one). */
  tiers?: { limit: number; burst: number }[] | undefined;
}

/** A rule's mode, as the live switch sets it: `off` skips the rule, `monitor` counts and never denies. */
export type Mode = "on" | "monitor" | "off";

/** One call of a request: which rule, which identity (0 or 1), what cost. */
export interface SimCall {
  rule: number;
  identity: number;
  cost: number;
  /** The client's tier under the rule (an index into its `tiers`); absent = the rule's own limits. */
  tier?: number | undefined;
  /** A shed rule: the request's priority class (an index into its shares); absent or past them = unlisted. */
  priority?: number | undefined;
}

/** An override's body (`PUT /overrides/:rule/:identity`): its period in whole seconds, as the API takes it. */
export interface SimOverride {
  limit: number;
  periodS?: number | undefined;
  burst?: number | undefined;
  ttlS?: number | undefined;
}

/** What a scenario does, each at `at` ms after its start. */
export type Op =
  | {
      kind: "request";
      at: number;
      isolate: number;
      calls: SimCall[];
      /** A delayed request's client goes away this long after its answer (before its slot: a give-back). */
      abortAfterMs?: number;
      /** A concurrency slot is held this long before it is released. */
      holdMs: number;
      /** What happens to its own call to Redis, if it makes one. */
      fault?: Fault;
      /** Its response (`holdMs` after its admission): the status, and the cost its body states. */
      answer?: Answer | undefined;
    }
  | {
      kind: "burst";
      at: number;
      isolate: number;
      call: SimCall;
      n: number;
      /** Each delayed client of the burst goes away this long after its answer (a give-back). */
      abortAfterMs?: number | undefined;
      /** The response each of its requests gets (absent: 200, costing what it reserved). */
      answer?: Answer | undefined;
      /** A concurrency or shed slot each of its requests holds this long (absent: released at once). */
      holdMs?: number | undefined;
      /** Right after the burst, one request of the same call at this cost, its call to Redis meeting `fault`. */
      after?: { cost: number; fault?: Fault | undefined } | undefined;
    }
  /**
   * Requests of cost 1 through a client that holds no lease (a decider without leases, as a Worker with
   * leases off) until one is denied: the window's count is then all admitted, but for units parked in leases.
   */
  | { kind: "fill"; at: number; call: SimCall }
  | { kind: "reset"; at: number; rule: number; identity: number }
  /**
   * The admin API's override of one identity (PUT, through the real admin app: fence, write, re-aim), or its
   * removal (`set` absent: DELETE); a `ttlS` ends it by itself, with no admin call.
   */
  | { kind: "override"; at: number; rule: number; identity: number; set?: SimOverride | undefined }
  /** `fault` for the next command (of its kind), or the next `times` of them: a slow or failing spell. */
  | { kind: "fault"; at: number; fault: Fault; times?: number | undefined }
  /**
   * A live mode switch of one rule (docs/operating.md): each isolate hears of it `lagMs[k]` later (the
   * fills' isolate last), as the live modes reach each isolate on its next refresh.
   */
  | { kind: "mode"; at: number; rule: number; mode: Mode; lagMs: number[] }
  /** `PATCH /lists/l<list>` through isolate `isolate`'s admin app: `remove`, then `add`. */
  | { kind: "list"; at: number; isolate: number; list: number; add: SimEntry[]; remove: SimEntry[] };

/** An action rule of a scenario (docs/lists.md): it reads live list `list` and stands before counting rule `before`. */
export interface SimAction {
  action: "deny" | "allow";
  list: number;
  before: number;
  mode?: "on" | "monitor" | undefined;
}

/** A live list's entry: identity 0's or 1's address, or a CIDR holding both (test/sim/lists.ts). */
export type SimEntry = "ip0" | "ip1" | "net";

export interface Scenario {
  rules: SimRule[];
  /** Action rules reading live lists, walked before any Redis call (test/sim/lists.ts). */
  actions?: SimAction[] | undefined;
  /** How often an isolate reads the live modes (and so learns of a list's new version), ms. @default 1000 */
  liveRefreshMs?: number | undefined;
  isolates: number;
  /** Simulated databases (several: split decisions across them). */
  endpoints: number;
  /** Split by identity as on a Redis Cluster. */
  cluster: boolean;
  leaseMs: number;
  timeoutMs: number;
  /**
   * Operations' `at` counts from the first edge of a window of this length after the run starts (negative:
   * before it), so that edges are hit on purpose.
   */
  edgeMs: number;
  ops: Op[];
}
/** What one run found, and what it did. */
export interface RunReport extends Counts {
  violations: Violation[];
}

/** What one run did. */
export interface Counts {
  /** Operations executed: every request (a burst's each), reset and fault. */
  operations: number;
  admitted: number;
  /** Requests decided from leases alone. */
  fromLeases: number;
  /** Requests that spent a lease too short for them and sent Redis the rest. */
  shortSpends: number;
  /** Requests held for a reserved slot (a delay), and those whose client went away first (a give-back). */
  delayed: number;
  givenBack: number;
  /** Requests a fail-open rule's fallback limiter let through, and units a monitor rule counted. */
  fellBack: number;
  monitored: number;
  /** Responses a rule counting by status did not count (its units given back), and bodies a settled rule read. */
  uncounted: number;
  settled: number;
  /** Denials a penalty box answered (one that started a block, or one standing). */
  blocked: number;
  /** Requests a shed rule shed (or, in monitor, would have). */
  shed: number;
  /** Requests a `deny` rule's live list refused, and those an `allow` rule's took out of later rules. */
  refused: number;
  exempted: number;
}

/** A rule's name in the simulation's config and keys. */
export const ruleName = (rule: number): string => `r${rule}`;

/** A rule's index from its name. */
export const ruleIndex = (name: string): number => Number(name.slice(1));

/** An identity's hash: 22 characters of base64url, as `hashIdentity` makes them (the admin API takes `hash:` it). */
export const identityOf = (identity: number): string => `sim-identity-${identity}`.padEnd(22, "_");

/** The limits `c` is decided under: its tier's, else its rule's. */
export function limitsOf(scenario: Scenario, c: SimCall): Limits {
  const { algorithm, limit, periodMs, burst, tiers } = scenario.rules[c.rule] as SimRule;
  const tier = c.tier === undefined ? undefined : tiers?.[c.tier];
  return { algorithm, periodMs, limit: tier?.limit ?? limit, burst: tier?.burst ?? burst };
}
