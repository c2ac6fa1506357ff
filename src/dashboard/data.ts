/**
 * Reads what the dashboard shows (its shape: src/dashboard/view.ts): per-minute counts of the last hour, the
 * top denied and the closest-to-their-limit identities of the last 5 minutes (src/observability/metrics.ts
 * wrote them; one pipeline, minutes that have settled come from a per-isolate cache), the live modes (one
 * HMGET) and health (the shared health probe), three round trips at once. The page's first HTML and its refreshes (`dashboard.json`) both come from here.
 * Identities are hashed (`hash:…`) as stored; nothing here can show a raw one.
 *
 * Redis being down is when operators need the page most, so a failed read never fails it: counts show as
 * zero, modes as this isolate's own copy, and the health strip says Redis is unreachable. A Redis that hangs
 * costs the page one admin timeout in all (src/util/deadline.ts), not one per step, and nothing while the
 * breaker is open.
 */
import { type AdminContext, firstBreakerOpen } from "../admin/context";
import { healthOfEndpoints } from "../admin/health";
import { showHash } from "../admin/identity";
import { liveModesShown } from "../admin/live-copy";
import { formatPeriod } from "../admin/period";
import type { WaitUntil } from "../engine/types";
import { explainMode } from "../live/effective";
import { fieldMap } from "../live/modes";
import { metricsKeys, minuteOf } from "../observability/metrics";
import { type Deadline, withDeadline } from "../util/deadline";
import { type Read, readSettled } from "./settled";
import { type DashboardData, pairs, type RuleView, shapingOf, VERDICT_FIELDS, zero } from "./view";

/** Minutes in the chart (the last hour). */
const CHART_MINUTES = 60;
/** Minutes in the short view (counts, top denied, closest to their limit). */
const RECENT_MINUTES = 5;
const LISTED = 5;

/**
 * Reads the dashboard's numbers; flushes this isolate's own pending counts first, so they show at once.
 * `waitUntil` is the request's (`executionCtx.waitUntil`), for the shared health probe, a live-mode refresh
 * and a flush the read stopped waiting for. The flush and the reads share one deadline, `adminTimeoutMs`.
 */
export async function readDashboard(admin: AdminContext, waitUntil: WaitUntil): Promise<DashboardData> {
  return withDeadline(admin.adminTimeoutMs, (deadline) => readWithin(admin, waitUntil, deadline));
}

async function readWithin(
  admin: AdminContext,
  waitUntil: WaitUntil,
  deadline: Deadline,
): Promise<DashboardData> {
  // The counts and the live modes live on the first endpoint. While its breaker is open, the last decisions
  // there already failed: the page answers at once from what this isolate knows (its rules, its copy of the
  // modes, the breaker's state), as health does, rather than wait out the deadline on a Redis not answering.
  const breakerOpen = firstBreakerOpen(admin);
  if (admin.metrics && !breakerOpen) {
    const flush = admin.metrics.flush();
    // Cut short, it still lands when Redis answers within the admin timeout (counts are best effort).
    waitUntil(flush);
    await deadline.within(() => flush).catch(() => {});
  }
  const { prefix, rules } = admin.config;
  const nowMinute = minuteOf(Date.now());
  const minutes = Array.from({ length: CHART_MINUTES }, (_, i) => nowMinute - CHART_MINUTES + 1 + i);
  const recent = minutes.slice(-RECENT_MINUTES);

  const reads: Read[] = minutes.map((minute) => ({
    key: metricsKeys(prefix, minute).counts,
    minute,
    command: (key) => ["hgetall", key],
  }));
  for (const rule of rules) {
    for (const minute of recent) {
      const keys = metricsKeys(prefix, minute);
      reads.push(
        {
          key: keys.denied(rule.name),
          minute,
          command: (key) => ["zrange", key, 0, LISTED - 1, "rev", "withscores"],
        },
        {
          key: keys.near(rule.name),
          minute,
          command: (key) => ["zrange", key, 0, LISTED - 1, "withscores"],
        },
      );
    }
  }
  const noReplies = () => reads.map(() => null); // every count zero, every list empty
  const [replies, live, health] = await Promise.all([
    breakerOpen
      ? noReplies()
      : deadline
          .within(() => readSettled(admin.redis, reads, nowMinute, CHART_MINUTES))
          .catch((error): unknown[] => {
            logReadFailure("metrics", error);
            return noReplies();
          }),
    liveModesShown(admin, waitUntil, "dashboard_read_failed", deadline).then((shown) => shown.live),
    // As `/health` waits (the decision budget), within what is left of the read's own wait.
    healthOfEndpoints(admin.endpoints, admin.scriptSha, admin.endpointHealth(), {
      waitUntil,
      waitMs: Math.min(admin.config.timeoutMs, deadline.remainingMs()),
      jwks: admin.jwks?.(),
    }),
  ]);
  const perMinute = replies.slice(0, CHART_MINUTES).map((reply) => fieldMap(reply));
  const count = (fields: Record<string, unknown>, field: string) => Number(fields[field] ?? 0) || 0;

  const decisions = {
    last5m: 0,
    last1h: 0,
    leased5m: 0,
    degraded5m: {} as Record<string, number>,
    degraded1h: {} as Record<string, number>,
  };
  perMinute.forEach((fields, i) => {
    const isRecent = i >= CHART_MINUTES - RECENT_MINUTES;
    for (const field of Object.keys(fields)) {
      if (field === "~decisions") {
        decisions.last1h += count(fields, field);
        if (isRecent) decisions.last5m += count(fields, field);
      } else if (field === "~lease") {
        if (isRecent) decisions.leased5m += count(fields, field);
      } else if (field.startsWith("~degraded:")) {
        const reason = field.slice("~degraded:".length);
        decisions.degraded1h[reason] = (decisions.degraded1h[reason] ?? 0) + count(fields, field);
        if (isRecent)
          decisions.degraded5m[reason] = (decisions.degraded5m[reason] ?? 0) + count(fields, field);
      }
    }
  });

  let next = CHART_MINUTES;
  const views = rules.map((rule): RuleView => {
    const last5m = zero();
    const last1h = zero();
    const series = perMinute.map((fields, i): [number, number, number] => {
      for (const [verdict, name] of VERDICT_FIELDS) {
        const n = count(fields, `${rule.name}:${verdict}`);
        last1h[name] += n;
        if (i >= CHART_MINUTES - RECENT_MINUTES) last5m[name] += n;
      }
      const at = (v: string) => count(fields, `${rule.name}:${v}`);
      return [at("allowed"), at("denied"), at("would-deny")];
    });
    const denied = new Map<string, number>();
    const near = new Map<string, number>();
    for (let m = 0; m < RECENT_MINUTES; m++) {
      for (const [member, score] of pairs(replies[next++]))
        denied.set(member, (denied.get(member) ?? 0) + score);
      for (const [member, score] of pairs(replies[next++]))
        near.set(member, Math.min(near.get(member) ?? score, score));
    }
    const mode = explainMode(rule, admin.config.mode, live);
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
        .map(([hash, permille]) => ({ identity: showHash(hash), remainingPercent: permille / 10 })),
    };
  });
  return { generatedAt: new Date().toISOString(), health, decisions, rules: views };
}

/** One log line for a read the page went without: the error's class only, as every log line here. */
function logReadFailure(read: "metrics", error: unknown): void {
  const name = error instanceof Error ? error.name : typeof error;
  console.error(JSON.stringify({ event: "dashboard_read_failed", read, error: name }));
}
