/**
 * `GET /keys/:rule/:identity`'s `settlement`, for a rule that counts by status or settles its cost
 * (docs/settle.md, "Seeing it"): what the rule counts and settles from, and the identity's last settlement or
 * give-back of the last hour, as the isolates' dashboard counts recorded it (src/observability/metrics.ts: one
 * hash per rule and minute, flushed every few seconds; this isolate's own pending counts are flushed first).
 * Redis itself keeps no record of which units are reservations (that would cost every request a write): a
 * request in flight shows only in `remaining`.
 */
import type { RuleConfig } from "../config/rule-config";
import { metricsKeys, minuteOf, parseSettled } from "../observability/metrics";
import type { AdminContext } from "./context";

/** Minutes searched for the last settlement, newest first (the dashboard's hour). */
const SEARCHED_MINUTES = 60;

/** The `settlement` member of the answer: `undefined` for a rule that neither counts by status nor settles. */
export async function settlementOf(admin: AdminContext, rule: RuleConfig, identityHash: string) {
  if (rule.count === undefined && rule.settle === undefined) return undefined;
  return {
    count: rule.count ? [...rule.count.status] : null,
    settle: rule.settle?.text ?? null,
    last: await lastSettlement(admin, rule.name, identityHash),
  };
}

async function lastSettlement(admin: AdminContext, rule: string, identityHash: string) {
  if (!admin.metrics) return null; // no dashboard counts kept (no admin token): nothing recorded
  await admin.metrics.flush();
  const nowMinute = minuteOf(Date.now());
  const minutes = Array.from({ length: SEARCHED_MINUTES }, (_, i) => nowMinute - i);
  const replies = await admin.redis.pipeline(
    minutes.map((minute) => ["hget", metricsKeys(admin.config.prefix, minute).settled(rule), identityHash]),
  );
  for (const reply of replies) {
    const last = parseSettled(reply);
    if (!last) continue;
    return {
      at: new Date(last.atMs).toISOString(),
      outcome: last.outcome,
      reserved: last.reserved,
      cost: last.cost ?? null,
      applied: last.applied,
      // After a charge: what the rule had left, negative = a debt (denied until repaid).
      remaining: last.remaining ?? null,
    };
  }
  return null;
}
