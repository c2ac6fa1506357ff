/**
 * An admin change recorded within its route's one wait for Redis (src/util/deadline.ts).
 */
import type { Context } from "hono";
import { type AdminChange, recordChange } from "../live/changes";
import type { Deadline } from "../util/deadline";
import type { AdminEnv } from "./context";

/**
 * Records an admin change (a reset, an override set or removed) in the change log within the route's deadline. Once started, it is left to
 * finish in the background (`waitUntil`) should the deadline pass: an epoch taken whose entry is never
 * written stops other isolates' reading of the log at that entry (src/live/changes.ts).
 */
export function recordWithin(c: Context<AdminEnv>, deadline: Deadline, change: AdminChange): Promise<void> {
  const admin = c.get("admin");
  return deadline.within(() => {
    const recording = recordChange(admin.redis, admin.config.prefix, change);
    // Its failure is the route's to answer, or, past the deadline, nobody's.
    c.executionCtx.waitUntil(recording.catch(() => {}));
    return recording;
  });
}
