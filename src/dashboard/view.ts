/**
 * What the dashboard shows (src/dashboard/render.ts draws it, `dashboard.json` carries it): the page's data,
 * and the small pieces that turn Redis's replies into it. Reading them is src/dashboard/data.ts.
 */
import type { HealthReport } from "../admin/health";
import type { RuleConfig } from "../config/rule-config";
import type { Mode } from "../engine/types";
import type { ModeSource } from "../live/effective";
import { shedAbove } from "../middleware/shed";
import type { PendingCounts } from "../observability/metrics";
import type { SettlementView } from "./settlement";

/** Requests per verdict. */
export interface Counts {
  allowed: number;
  denied: number;
  wouldDeny: number;
  unavailable: number;
}

/** One rule as the dashboard shows it. */
export interface RuleView {
  name: string;
  algorithm: string;
  key: string;
  limit: number;
  period: string;
  burst: number;
  /** How the rule shapes or sheds, in words (a delay, a shed rule's classes); absent for plain rules. */
  shaping?: string;
  mode: { effective: Mode; source: ModeSource };
  last5m: Counts;
  last1h: Counts;
  /** One point per minute, oldest first: [allowed, denied, would-deny]. */
  series: Array<[number, number, number]>;
  /**
   * `label`: the operator's label for the identity, when it has one (src/dashboard/labels.ts); `hint`: its
   * masked hint, with `RATE_LIMIT_DASHBOARD_HINTS` on (src/dashboard/hints.ts).
   */
  topDenied: Array<{ identity: string; count: number; label?: string; hint?: string }>;
  /** Lowest remaining quota seen, in % of the capacity (never above 100). */
  nearest: Array<{ identity: string; remainingPercent: number; label?: string; hint?: string }>;
  /** The requests denied most (incl. would-deny), as `<METHOD> <path>` with id-like segments as `:id`. */
  topPaths: Array<{ route: string; count: number }>;
  /** What a full state holds: a bucket's `burst` (token-bucket, gcra), otherwise the `limit`. */
  capacity: { of: "burst" | "limit"; units: number };
  /** A rule with a `block`: how long a denial blocks for (`15m`); its blocked identities: render-blocks.ts. */
  block?: string;
  /** A rule that counts by status or settles its cost: its settlements over the last hour. */
  settlement?: SettlementView;
}

/** An `action` rule as the dashboard shows it (render-lists.ts): what it matches and what it refused. */
export interface ActionView {
  name: string;
  action: "deny" | "allow";
  /** Its `match`, in words (`list incident`, `ip 2 entries`, `path /api/*`). */
  matches: string;
  mode: { effective: Mode; source: ModeSource };
  /** Requests it refused (`denied`), or would have in monitor mode (`wouldDeny`); an allow refuses none. */
  last5m: Pick<Counts, "denied" | "wouldDeny">;
  last1h: Pick<Counts, "denied" | "wouldDeny">;
}

/** A live list a rule reads (`match.list`): its entries are read by the page's script when opened. */
export interface ListView {
  name: string;
  /** The rules that read it, in the order written. */
  usedBy: string[];
}

/** Everything on the page. */
export interface DashboardData {
  generatedAt: string;
  health: HealthReport;
  /** Decisions, and those not (fully) from Redis by reason, over the last 5 minutes and hour. */
  decisions: {
    last5m: number;
    last1h: number;
    /** Decided in an isolate from a lease, with no Redis call (docs/leases.md), last 5 minutes. */
    leased5m: number;
    degraded5m: Record<string, number>;
    degraded1h: Record<string, number>;
    /** Answered in the isolate by design, last 5 minutes: from a lease, and from the deny cache. */
    servedLocally5m: { lease: number; denyCache: number };
    /** Degraded, last 5 minutes: `degraded5m` without the deny cache (timeouts, errors, the breaker, the fallback). */
    faults5m: Record<string, number>;
    /** Decisions Redis could not make, last 5 minutes: let through (`failure = "open"`) or answered 503. */
    failedOpen5m: number;
    failedClosed5m: number;
  };
  /** False when the counts could not be read from Redis: every count above is then 0, not a measurement. */
  countsRead: boolean;
  /**
   * Only while the counts could not be read: what this isolate decided and has not written yet (it writes
   * them once Redis answers, and they join the counts above).
   */
  isolate?: PendingCounts;
  rules: RuleView[];
  /** The `action` rules, in the order written. */
  actions: ActionView[];
  /** The live lists the rules read. */
  lists: ListView[];
}

/** A delay, or a shed rule's classes with the in-flight count each is shed above. */
export function shapingOf(rule: RuleConfig): { shaping?: string } {
  const { shed } = rule;
  if (shed) {
    const classes = Object.entries(shed.classes)
      .sort(([, a], [, b]) => b - a)
      .map(([name, share]) => `${name} above ${shedAbove(rule.limit, shed.shards, share)}`);
    return { shaping: `sheds by ${shed.priorityText}: ${classes.join(", ")} in flight` };
  }
  return rule.delayMs > 0 ? { shaping: `holds a request up to ${rule.delayMs} ms for its slot` } : {};
}

/** Counts of nothing yet. */
export const zero = (): Counts => ({ allowed: 0, denied: 0, wouldDeny: 0, unavailable: 0 });
/** Each verdict's field in the metrics hash (src/observability/metrics.ts) and its name in `Counts`. */
export const VERDICT_FIELDS: Array<[string, keyof Counts]> = [
  ["allowed", "allowed"],
  ["denied", "denied"],
  ["would-deny", "wouldDeny"],
  ["unavailable", "unavailable"],
];

/** A `ZRANGE … WITHSCORES` reply as [member, score] pairs. */
export function pairs(reply: unknown): Array<[string, number]> {
  if (!Array.isArray(reply)) return [];
  const out: Array<[string, number]> = [];
  for (let i = 0; i + 1 < reply.length; i += 2) out.push([String(reply[i]), Number(reply[i + 1])]);
  return out;
}
