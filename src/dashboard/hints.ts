/**
 * Masked hints of who a listed identity is (`mal…`, `203.0.113.x`), with `RATE_LIMIT_DASHBOARD_HINTS` on
 * (docs/operating.md, "Hints"): the metrics flush writes them for the identities it lists, masked at the edge
 * (src/identity/show.ts), into one hash per hour (src/observability/metric-keys.ts); the page reads this hour's
 * and the last one's with one HMGET each, in one pipeline. A raw value never reaches Redis or the page.
 */
import type { AdminContext } from "../admin/context";
import { hashValues } from "../live/modes";
import { hintField, hintsKey } from "../observability/metric-keys";

/** The hints of these (rule, hash) pairs, by `<rule>:<hash>`; nothing read when hints are off or none is listed. */
export async function readHints(
  admin: AdminContext,
  wanted: Array<{ rule: string; identityHash: string }>,
): Promise<Map<string, string>> {
  const hints = new Map<string, string>();
  if (!admin.config.dashboardHints || wanted.length === 0) return hints;
  const fields = [...new Set(wanted.map((w) => hintField(w.rule, w.identityHash)))];
  const hour = Math.floor(Date.now() / 3_600_000);
  // This hour's first: a newer hint of the same identity wins (they only differ if its masking did).
  const replies = await admin.redis.pipeline(
    [hour, hour - 1].map((h) => ["hmget", hintsKey(admin.config.prefix, h), ...fields]),
  );
  for (const reply of replies) {
    hashValues(reply, fields).forEach((value, i) => {
      const field = fields[i] as string;
      if (typeof value === "string" && !hints.has(field)) hints.set(field, value);
    });
  }
  return hints;
}
