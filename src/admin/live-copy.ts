/**
 * The live modes an admin view shows (`GET /rules`, the dashboard): read from the first endpoint, or, while its
 * breaker is open or when the read fails, this isolate's own copy, the modes it obeys right now (docs/operating.md,
 * "Live mode switch": `liveModesFrom`). A Redis that is down is when operators need these views most.
 */
import type { WaitUntil } from "../engine/types";
import { type LiveModes, NO_LIVE_MODES, readLiveModes } from "../live/modes";
import { type Deadline, NO_DEADLINE } from "../util/deadline";
import { type AdminContext, firstBreakerOpen } from "./context";

/** Where the live modes shown came from: Redis, or this isolate's own copy when Redis could not be read. */
export type LiveModesFrom = "redis" | "isolate";

/**
 * The live modes to show, and where they came from. A failed read is logged as `event` (the error's class
 * only: its message may quote a command).
 */
export async function liveModesShown(
  admin: AdminContext,
  waitUntil: WaitUntil,
  event: "admin_read_failed" | "dashboard_read_failed",
  deadline: Deadline = NO_DEADLINE,
): Promise<{ live: LiveModes; from: LiveModesFrom }> {
  const isolateCopy = async () => ({
    live: await (admin.liveModes?.current(waitUntil) ?? NO_LIVE_MODES),
    from: "isolate" as const,
  });
  if (firstBreakerOpen(admin)) return isolateCopy();
  // Action rules have live modes too (docs/lists.md, "Modes").
  const names = [...admin.config.rules, ...(admin.config.actions ?? [])].map((rule) => rule.name);
  try {
    return {
      live: await deadline.within(() => readLiveModes(admin.redis, admin.config.prefix, names)),
      from: "redis",
    };
  } catch (error) {
    const name = error instanceof Error ? error.name : typeof error;
    console.error(JSON.stringify({ event, read: "live_modes", error: name }));
    return isolateCopy();
  }
}
