/**
 * Turns the metrics replies (src/dashboard/data.ts read them) into what the page shows: the deployment's
 * decisions by source, and each rule's counts, chart, top denied and closest to their limit.
 */
import { formatPeriod } from "../admin/period";
import { showHash } from "../admin/identity";
import type { ActionRule, FloodgateConfig, RuleConfig } from "../config";
import { traitsOf } from "../engine/algorithms";
import { explainMode } from "../live/effective";
import type { LiveModes } from "../live/modes";
import { settlementView } from "./settlement";
import {
  type ActionView,
  type DashboardData,
  type ListView,
  pairs,
  type RuleView,
  shapingOf,
  VERDICT_FIELDS,
  zero,
} from "./view";

/** Minutes in the chart (the last hour). */
export const CHART_MINUTES = 60;
/** Minutes in the short view (counts, top denied, closest to their limit). */
export const RECENT_MINUTES = 5;
/** Identities per list. */
export const LISTED = 5;

/** The minutes' count hashes (oldest first) and each (rule, minute)'s lists; undefined when Redis failed. */
export interface MetricsReplies {
  perMinute: Array<Record<string, unknown>>;
  /** `${rule}|${minute index}` → the ZRANGE WITHSCORES replies (absent: that minute's list is empty). */
  denied: Map<string, unknown>;
  near: Map<string, unknown>;
  paths: Map<string, unknown>;
}

/** Reasons a decision is answered in the isolate by design, not because Redis failed. */
const SERVED_LOCALLY = new Set(["deny_cache"]);

type Tallied = Pick<DashboardData, "decisions" | "countsRead" | "rules" | "actions" | "lists">;

/** The page's numbers from the replies (`undefined`: Redis could not be read, every count 0). */
export function tally(
  config: Pick<FloodgateConfig, "rules" | "mode"> & Partial<Pick<FloodgateConfig, "actions">>,
  live: LiveModes,
  metrics: MetricsReplies | undefined,
): Tallied {
  const perMinute = metrics?.perMinute ?? Array.from({ length: CHART_MINUTES }, () => ({}));
  const count = (fields: Record<string, unknown>, field: string) => Number(fields[field] ?? 0) || 0;
  const isRecent = (i: number) => i >= CHART_MINUTES - RECENT_MINUTES;

  const decisions: DashboardData["decisions"] = {
    last5m: 0,
    last1h: 0,
    leased5m: 0,
    degraded5m: {},
    degraded1h: {},
    servedLocally5m: { lease: 0, denyCache: 0 },
    faults5m: {},
    failedOpen5m: 0,
    failedClosed5m: 0,
  };
  perMinute.forEach((fields, i) => {
    for (const field of Object.keys(fields)) {
      const n = count(fields, field);
      if (field === "~decisions") {
        decisions.last1h += n;
        if (isRecent(i)) decisions.last5m += n;
      } else if (!isRecent(i)) {
        if (field.startsWith("~degraded:")) add(decisions.degraded1h, field.slice("~degraded:".length), n);
      } else if (field === "~lease") {
        decisions.leased5m += n;
      } else if (field === "~failed-open") {
        decisions.failedOpen5m += n;
      } else if (field === "~failed-closed") {
        decisions.failedClosed5m += n;
      } else if (field.startsWith("~degraded:")) {
        const reason = field.slice("~degraded:".length);
        add(decisions.degraded1h, reason, n);
        add(decisions.degraded5m, reason, n);
        if (!SERVED_LOCALLY.has(reason)) add(decisions.faults5m, reason, n);
      }
    }
  });
  decisions.servedLocally5m = {
    lease: decisions.leased5m,
    denyCache: decisions.degraded5m.deny_cache ?? 0,
  };

  const rules = config.rules.map((rule): RuleView => {
    const last5m = zero();
    const last1h = zero();
    const series = perMinute.map((fields, i): [number, number, number] => {
      for (const [verdict, name] of VERDICT_FIELDS) {
        const n = count(fields, `${rule.name}:${verdict}`);
        last1h[name] += n;
        if (isRecent(i)) last5m[name] += n;
      }
      const at = (v: string) => count(fields, `${rule.name}:${v}`);
      return [at("allowed"), at("denied"), at("would-deny")];
    });
    const denied = new Map<string, number>();
    const near = new Map<string, number>();
    const paths = new Map<string, number>();
    for (let i = CHART_MINUTES - RECENT_MINUTES; i < CHART_MINUTES; i++) {
      for (const [member, score] of pairs(metrics?.denied.get(`${rule.name}|${i}`)))
        denied.set(member, (denied.get(member) ?? 0) + score);
      for (const [route, score] of pairs(metrics?.paths.get(`${rule.name}|${i}`)))
        paths.set(route, (paths.get(route) ?? 0) + score);
      for (const [member, score] of pairs(metrics?.near.get(`${rule.name}|${i}`)))
        near.set(member, Math.min(near.get(member) ?? score, score));
    }
    const mode = explainMode(rule, config.mode, live);
    const bucket = traitsOf(rule.algorithm).takesBurst;
    return {
      name: rule.name,
      algorithm: rule.algorithm,
      key: rule.keyText,
      limit: rule.limit,
      period: formatPeriod(rule.periodMs),
      burst: rule.burst,
      ...shapingOf(rule),
      mode: { effective: mode.mode, source: mode.source },
      last5m,
      last1h,
      series,
      topDenied: [...denied]
        .sort((a, b) => b[1] - a[1])
        .slice(0, LISTED)
        .map(([hash, n]) => ({ identity: showHash(hash), count: n })),
      nearest: [...near]
        .sort((a, b) => a[1] - b[1])
        .slice(0, LISTED)
        .map(([hash, permille]) => ({
          identity: showHash(hash),
          remainingPercent: Math.min(100, permille / 10),
        })),
      topPaths: [...paths]
        .sort((a, b) => b[1] - a[1])
        .slice(0, LISTED)
        .map(([route, n]) => ({ route, count: n })),
      capacity: bucket ? { of: "burst", units: rule.burst } : { of: "limit", units: rule.limit },
      ...(rule.blockMs === undefined ? {} : { block: formatPeriod(rule.blockMs) }),
      ...settled(rule, perMinute),
    };
  });
  const actions = (config.actions ?? []).map((action): ActionView => {
    const last5m = { denied: 0, wouldDeny: 0 };
    const last1h = { denied: 0, wouldDeny: 0 };
    perMinute.forEach((fields, i) => {
      for (const [field, name] of [
        ["denied", "denied"],
        ["would-deny", "wouldDeny"],
      ] as const) {
        const n = count(fields, `${action.name}:${field}`);
        last1h[name] += n;
        if (isRecent(i)) last5m[name] += n;
      }
    });
    const mode = explainMode(action, config.mode, live);
    return {
      name: action.name,
      action: action.action,
      matches: matchText(action.match),
      mode: { effective: mode.mode, source: mode.source },
      last5m,
      last1h,
    };
  });
  return { decisions, countsRead: metrics !== undefined, rules, actions, lists: listsOf(config) };
}

/** An action rule's `match` in words, short: a list by name, addresses and other sets by their size. */
function matchText(match: ActionRule["match"]): string {
  const parts: string[] = [];
  if (match.list !== undefined) parts.push(`list ${match.list}`);
  if (match.methods) parts.push(match.methods.join(","));
  if (match.host !== undefined) parts.push(`host ${match.host}`);
  if (match.path !== undefined) parts.push(`path ${match.path}`);
  for (const field of ["ip", "country", "asn", "user_agent"] as const) {
    const values = match[field];
    if (values) parts.push(`${field} (${values.length})`);
  }
  return parts.join(", ") || "every request";
}

/** The live lists the rules read, each with the rules reading it, in the order written. */
function listsOf(config: { rules: readonly RuleConfig[]; actions?: readonly ActionRule[] }): ListView[] {
  const ordered = [...(config.actions ?? []), ...config.rules].sort(
    (a, b) => writtenAt(a, config.rules) - writtenAt(b, config.rules),
  );
  const lists = new Map<string, string[]>();
  for (const rule of ordered) {
    const list = rule.match.list;
    if (list === undefined) continue;
    lists.set(list, [...(lists.get(list) ?? []), rule.name]);
  }
  return [...lists].map(([name, usedBy]) => ({ name, usedBy }));
}

/** Where a rule is written among all rules (an action rule just before `rules[before]`). */
const writtenAt = (rule: RuleConfig | ActionRule, rules: readonly RuleConfig[]): number =>
  "action" in rule ? rule.before * 2 : rules.indexOf(rule) * 2 + 1;

/** `{ settlement }` for a rule that counts by status or settles, else nothing. */
function settled(rule: FloodgateConfig["rules"][number], perMinute: Array<Record<string, unknown>>) {
  const settlement = settlementView(rule, perMinute);
  return settlement === undefined ? {} : { settlement };
}

function add(into: Record<string, number>, key: string, n: number): void {
  into[key] = (into[key] ?? 0) + n;
}
