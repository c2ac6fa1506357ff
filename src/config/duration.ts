/** Periods in the rule syntax: `"30s"`, `"1m"`, `"1h"`, `"1d"`, or a whole number of seconds. */

const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** The shortest period a rule may have. */
export const MIN_PERIOD_MS = 1_000;
/** The longest period a rule may have (30 days). */
export const MAX_PERIOD_MS = 30 * 86_400_000;

/**
 * Parses a period into milliseconds, or returns `undefined` when it is not a duration at all.
 * Range checks (1s..30d) are left to the caller so its message can say which bound was crossed.
 */
export function parseDurationMs(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isInteger(value) ? value * 1_000 : undefined;
  if (typeof value !== "string") return undefined;
  const match = /^\s*(\d{1,9})\s*([smhd]?)\s*$/.exec(value);
  if (!match) return undefined;
  const unit = (match[2] || "s") as keyof typeof UNIT_MS;
  return Number(match[1]) * UNIT_MS[unit];
}
