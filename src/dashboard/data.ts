/**
 * Reads what the dashboard shows (its shape: src/dashboard/view.ts): per-minute counts of the last hour, the
 * top denied and the closest-to-their-limit identities of the last 5 minutes (src/observability/metrics.ts
 * wrote them; minutes that have settled come from a per-isolate cache), the live modes (one HMGET) and
 * health (the shared health probe). The page's first HTML and its refreshes (`dashboard.json`) both come
 * from here. Identities are hashed (`hash:…`) as stored; nothing here can show a raw one.
 *
 * The counts are read first and the lists after, only for the minutes whose counts say a list has members
 * (a denial for the top denied and the paths denied most, an allowed request for the closest to their limit);
 * then the labels of the identities listed (one HMGET, src/dashboard/labels.ts): an idle deployment's
 * refresh costs the two unsettled minutes' HGETALLs, the live modes and the health probe, whatever the
 * number of rules (docs/operating.md, "Dashboard").
 *
 * Redis being down is when operators need the page most, so a failed read never fails it: counts show as
 * zero with `countsRead: false` (the page then keeps its last good numbers, greyed), modes as this isolate's
 * own copy, and the health strip says Redis is unreachable. A Redis that hangs costs the page one admin
 * timeout in all (src/util/deadline.ts), not one per step, and nothing while the breaker is open.
 */
import { type AdminContext, firstBreakerOpen } from "../admin/context";
import { healthOfEndpoints } from "../admin/health";
import { liveModesShown } from "../admin/live-copy";
import type { WaitUntil } from "../engine/types";
import { HASH_PREFIX } from "../identity/show";
import { fieldMap } from "../live/modes";
import { metricsKeys, minuteOf } from "../observability/metrics";
import { type Deadline, withDeadline } from "../util/deadline";
import { type Read, readSettled } from "./settled";
import { CHART_MINUTES, LISTED, type MetricsReplies, RECENT_MINUTES, tally } from "./tally";
import { readHints } from "./hints";
import { readLabels } from "./labels";
import type { DashboardData, RuleView } from "./view";

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
  const [metrics, live, health] = await Promise.all([
    breakerOpen ? undefined : readMetrics(admin, deadline),
    liveModesShown(admin, waitUntil, "dashboard_read_failed", deadline).then((shown) => shown.live),
    // As `/health` waits (the decision budget), within what is left of the read's own wait.
    healthOfEndpoints(admin.endpoints, admin.scriptSha, admin.endpointHealth(), {
      waitUntil,
      waitMs: Math.min(admin.config.timeoutMs, deadline.remainingMs()),
      jwks: admin.jwks?.(),
    }),
  ]);
  const tallied = tally(admin.config, live, metrics);
  await labelListed(admin, tallied.rules, deadline);
  return {
    generatedAt: new Date().toISOString(),
    health,
    ...tallied,
    // Only while the counts could not be read: what this isolate decided and has not flushed (it merges them
    // into the shared counts once Redis answers again).
    ...(metrics || !admin.metrics?.pending ? {} : { isolate: admin.metrics.pending() }),
  };
}

async function readMetrics(admin: AdminContext, deadline: Deadline): Promise<MetricsReplies | undefined> {
  const { prefix, rules } = admin.config;
  const nowMinute = minuteOf(Date.now());
  const minutes = Array.from({ length: CHART_MINUTES }, (_, i) => nowMinute - CHART_MINUTES + 1 + i);
  const countReads: Read[] = minutes.map((minute) => ({
    key: metricsKeys(prefix, minute).counts,
    minute,
    command: (key) => ["hgetall", key],
  }));
  try {
    const perMinute = (
      await deadline.within(() => readSettled(admin.redis, countReads, nowMinute, CHART_MINUTES))
    ).map((reply) => fieldMap(reply));
    const listReads: Array<{ read: Read; into: Map<string, unknown>; at: string }> = [];
    const denied = new Map<string, unknown>();
    const near = new Map<string, unknown>();
    const paths = new Map<string, unknown>();
    const count = (fields: Record<string, unknown>, field: string) => Number(fields[field] ?? 0) || 0;
    for (let i = CHART_MINUTES - RECENT_MINUTES; i < CHART_MINUTES; i++) {
      const fields = perMinute[i] ?? {};
      const minute = minutes[i] as number;
      const keys = metricsKeys(prefix, minute);
      for (const rule of rules) {
        const at = `${rule.name}|${i}`;
        if (count(fields, `${rule.name}:denied`) + count(fields, `${rule.name}:would-deny`) > 0) {
          const command: Read["command"] = (key) => ["zrange", key, 0, LISTED - 1, "rev", "withscores"];
          listReads.push({ read: { key: keys.denied(rule.name), minute, command }, into: denied, at });
          listReads.push({ read: { key: keys.paths(rule.name), minute, command }, into: paths, at });
        }
        if (count(fields, `${rule.name}:allowed`) > 0) {
          const command: Read["command"] = (key) => ["zrange", key, 0, LISTED - 1, "withscores"];
          listReads.push({ read: { key: keys.near(rule.name), minute, command }, into: near, at });
        }
      }
    }
    if (listReads.length > 0) {
      const reads = listReads.map((entry) => entry.read);
      const replies = await deadline.within(() => readSettled(admin.redis, reads, nowMinute, CHART_MINUTES));
      listReads.forEach((entry, j) => {
        entry.into.set(entry.at, replies[j]);
      });
    }
    return { perMinute, denied, near, paths };
  } catch (error) {
    const name = error instanceof Error ? error.name : typeof error;
    console.error(JSON.stringify({ event: "dashboard_read_failed", read: "metrics", error: name }));
    return undefined;
  }
}

/**
 * Puts each listed identity's label on it (one HMGET for the page; none when nothing is listed), and its masked
 * hint with `RATE_LIMIT_DASHBOARD_HINTS` on (src/dashboard/hints.ts).
 */
async function labelListed(admin: AdminContext, rules: RuleView[], deadline: Deadline): Promise<void> {
  const items = rules.flatMap((rule) =>
    [...rule.topDenied, ...rule.nearest].map((item) => ({ rule: rule.name, item })),
  );
  if (items.length === 0) return;
  const wanted = items.map(({ rule, item }) => ({
    rule,
    identityHash: item.identity.slice(HASH_PREFIX.length),
  }));
  const none = () => new Map<string, string>();
  const [labels, hints] = await Promise.all([
    deadline.within(() => readLabels(admin, wanted)).catch(none),
    deadline.within(() => readHints(admin, wanted)).catch(none),
  ]);
  for (const { rule, item } of items) {
    const field = `${rule}:${item.identity.slice(HASH_PREFIX.length)}`;
    const label = labels.get(field);
    if (label !== undefined) item.label = label;
    const hint = hints.get(field);
    if (hint !== undefined) item.hint = hint;
  }
}
