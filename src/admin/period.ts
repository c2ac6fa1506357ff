/** Periods as the admin API shows them: in the rule syntax, with the largest whole unit (`3600000` → `"1h"`). */

const UNITS: ReadonlyArray<[suffix: string, ms: number]> = [
  ["d", 86_400_000],
  ["h", 3_600_000],
  ["m", 60_000],
  ["s", 1_000],
];

/** `90000` → `"90s"`, `3600000` → `"1h"`, `86400000` → `"1d"`; sub-second remainders round up to seconds. */
export function formatPeriod(ms: number): string {
  for (const [suffix, unitMs] of UNITS) {
    if (ms >= unitMs && ms % unitMs === 0) return `${ms / unitMs}${suffix}`;
  }
  return `${Math.ceil(ms / 1000)}s`;
}
