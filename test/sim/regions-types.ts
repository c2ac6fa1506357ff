/**
 * What a regional scenario is (test/sim/regions.ts runs it, test/sim/regions-scenarios.ts draws it), where it
 * runs, and what a run reports.
 */
import type { Redis as IORedis } from "ioredis";
import type { RedisHandle } from "../../redis-rest/index.mjs";
import type { Limits, Violation } from "./model";
import type { Fault, Network } from "./network";

/** One rule: a leasable algorithm's limits; `lease = false` keeps it the primary's alone. */
export interface RegionRule extends Limits {
  algorithm: "fixed-window" | "sliding-window" | "sliding-log" | "token-bucket" | "gcra";
  lease?: boolean | undefined;
}

/** One call of a request: which rule, which identity, what cost. */
export interface RegionCall {
  rule: number;
  identity: number;
  cost: number;
}

/** An override's body (`PUT /overrides/:rule/:identity`). */
export interface RegionOverride {
  limit: number;
  /** A period of its own, whole seconds (absent: the rule's). */
  periodS?: number | undefined;
  burst?: number | undefined;
  ttlS?: number | undefined;
}

/** Where a fault strikes: the primary's way, or region `n`'s. */
export type Way = "primary" | number;

/** What a scenario does, each at `at` ms after its start. */
export type RegionOp =
  | {
      kind: "request";
      at: number;
      isolate: number;
      calls: RegionCall[];
      /** Decided as a request of no region (the primary, as without regions). */
      noRegion?: boolean | undefined;
      /** Queued on the primary's way just before it: what happens to its lease call (or the next one). */
      fault?: Fault | undefined;
    }
  | { kind: "burst"; at: number; isolate: number; call: RegionCall; n: number }
  /**
   * An admin reset (`DELETE /keys/…`) or an override set or removed (`set` absent: DELETE) through isolate
   * `admin`'s admin app; every other isolate hears of it `lagMs[k]` later (the change log's read).
   */
  | { kind: "reset"; at: number; admin: number; rule: number; identity: number; lagMs: number[] }
  | {
      kind: "override";
      at: number;
      admin: number;
      rule: number;
      identity: number;
      set?: RegionOverride | undefined;
      lagMs: number[];
    }
  /** `fault` for the next `times` commands on `way` (any command: spends, deposits, drops, decisions). */
  | { kind: "fault"; at: number; way: Way; fault: Fault; times?: number | undefined }
  /** Region `region`'s redis-server killed (SIGKILL), and a fresh, empty one started `downMs` later. */
  | { kind: "restart"; at: number; region: number; downMs: number }
  /** The primary's redis-server frozen (SIGSTOP) for `downMs`: its data kept, nothing answered. */
  | { kind: "freeze"; at: number; downMs: number };

export interface RegionScenario {
  rules: RegionRule[];
  /** Regional databases used (2 or 3). */
  regions: number;
  /** Isolates; isolate k is pinned to region k % regions. */
  isolates: number;
  /** The longest life of a region's lease, ms (30 s in production: short here, so pools expire in a run). */
  leaseMs: number;
  timeoutMs: number;
  /** Operations' `at` counts from the first edge of a window of this length after the run starts. */
  edgeMs: number;
  ops: RegionOp[];
}

/** A database of the setup: its server (to kill or freeze), its way in, and a direct client (reads only). */
export interface Database {
  server: RedisHandle;
  network: Network;
  redis: IORedis;
}

/** Where the regional system runs. */
export interface RegionsSetup {
  primary: Database;
  regions: Database[];
  token: string;
}

/** What one run found. */
export interface RegionReport {
  violations: Violation[];
  /** Operations executed: every request (a burst's each), admin change, fault, restart and freeze. */
  operations: number;
  admitted: number;
  /** Requests decided by their region's pools alone. */
  fromPools: number;
  /** Admin changes made (resets, overrides set or removed). */
  changes: number;
  /** Admin changes whose drops never all landed (their epoch after is not checked). */
  unchecked: number;
  /** Regional databases killed and restarted; spells the primary was frozen. */
  restarts: number;
  freezes: number;
}
