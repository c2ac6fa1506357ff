/**
 * Time fields of a rule: a period (a duration, or for a rule a calendar period) and a delay, each parsed into
 * what later stages read (milliseconds, or a calendar unit).
 */
import * as v from "valibot";
import { MAX_PERIOD_MS, MIN_PERIOD_MS, parseDurationMs } from "./duration";
import { show } from "./fields";

/** A period: `"30s"`, `"1m"`, `"1h"`, `"1d"` or whole seconds, 1s..30d; parsed into milliseconds. */
export const periodMs = v.pipe(
  v.unknown(),
  v.rawTransform(({ dataset, addIssue, NEVER }) => {
    const ms = parseDurationMs(dataset.value);
    if (ms === undefined) {
      addIssue({ message: `${show(dataset.value)} is not a duration` });
      return NEVER;
    }
    if (ms < MIN_PERIOD_MS || ms > MAX_PERIOD_MS) {
      addIssue({ message: `${show(dataset.value)} is outside 1s..30d` });
      return NEVER;
    }
    return ms;
  }),
);

/** `"calendar:day"` | `"calendar:week"` | `"calendar:month"` (docs/counting.md, "Calendar periods"). */
const CALENDAR_PERIOD = /^calendar:(day|week|month)$/;

/**
 * A rule's period: a duration (milliseconds, as {@link periodMs}) or a calendar period (its unit); a string
 * starting with `calendar:` is never read as a duration.
 */
export const rulePeriod = v.pipe(
  v.unknown(),
  v.rawTransform(({ dataset, addIssue, NEVER }) => {
    const value = dataset.value;
    if (typeof value === "string" && value.trim().startsWith("calendar:")) {
      const unit = CALENDAR_PERIOD.exec(value.trim())?.[1] as "day" | "week" | "month" | undefined;
      if (unit === undefined) {
        addIssue({
          message: `${show(value)} is not a calendar period (calendar:day | calendar:week | calendar:month)`,
        });
        return NEVER;
      }
      return { calendar: unit };
    }
    const ms = parseDurationMs(value);
    if (ms === undefined) {
      addIssue({ message: `${show(value)} is not a duration` });
      return NEVER;
    }
    if (ms < MIN_PERIOD_MS || ms > MAX_PERIOD_MS) {
      addIssue({ message: `${show(value)} is outside 1s..30d` });
      return NEVER;
    }
    return ms;
  }),
);

/** The longest a rule may hold a request for its slot (`delay`): a held request keeps its connection open. */
export const MAX_DELAY_MS = 60_000;

/** A delay: `"500ms"`, `"5s"`, `"1m"` or whole seconds, 0..60s; parsed into milliseconds. */
export const delayMs = v.pipe(
  v.unknown(),
  v.rawTransform(({ dataset, addIssue, NEVER }) => {
    const ms =
      typeof dataset.value === "string" && /^\s*\d{1,9}\s*ms\s*$/.test(dataset.value)
        ? Number.parseInt(dataset.value, 10)
        : parseDurationMs(dataset.value);
    if (ms === undefined) {
      addIssue({ message: `${show(dataset.value)} is not a duration (e.g. "500ms", "5s")` });
      return NEVER;
    }
    if (ms < 0) {
      addIssue({ message: `${show(dataset.value)} is negative (0 = deny at once, up to 60s)` });
      return NEVER;
    }
    if (ms > MAX_DELAY_MS) {
      addIssue({ message: `${show(dataset.value)} is longer than 60s` });
      return NEVER;
    }
    return ms;
  }),
);
