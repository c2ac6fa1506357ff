/**
 * Calendar periods (docs/counting.md, "Calendar periods"): a day, a week or a month of a time zone's calendar,
 * each starting at 00:00 local time of its first day. Where DST skips that midnight the period starts at the
 * first instant of that day (01:00, say); where it repeats an hour the first 00:00 counts. Months anchored
 * after the 28th start on the last day of a shorter month.
 *
 * The edge works out the boundaries around its own clock (`Intl`, the zone database of the runtime); the
 * script picks among them by Redis's clock (lua/decide/calendar.lua), so the period a request falls in is
 * decided by Redis time, and every instance computes the same boundaries.
 */

/** The three calendar units. */
export const CALENDAR_UNITS = ["day", "week", "month"] as const;
export type CalendarUnit = (typeof CALENDAR_UNITS)[number];

/** Week days as `anchor` spells them, Monday first (index = days after Monday). */
export const WEEKDAYS = [
  "monday",
  "tuesday",
  "wednesday",
  "thursday",
  "friday",
  "saturday",
  "sunday",
] as const;

/** A calendar period's definition, checked (src/config/calendar.ts). */
export interface CalendarSpec {
  unit: CalendarUnit;
  /** IANA time zone. */
  timeZone: string;
  /** month: the first day, 1–31; week: days after Monday, 0–6; day: 0. */
  anchor: number;
}

/**
 * The boundaries around an instant, ms since the epoch: the period before the current one starts at
 * `previousStartMs`, the current one spans `[startMs, endMs)`, the next one ends at `nextEndMs`.
 */
export interface CalendarBounds {
  previousStartMs: number;
  startMs: number;
  endMs: number;
  nextEndMs: number;
}

/** A local calendar date. */
interface LocalDate {
  y: number;
  m: number; // 1–12
  d: number; // 1–31
}

const HOUR_MS = 3_600_000;

/** Whether the runtime knows `timeZone` (an IANA name). */
export function isTimeZone(timeZone: string): boolean {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone });
    return true;
  } catch {
    return false;
  }
}

/** One formatter per zone: building one costs far more than using it. */
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterOf(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone);
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat("en-US", {
      timeZone,
      year: "numeric",
      month: "numeric",
      day: "numeric",
      era: "short",
    });
    formatters.set(timeZone, formatter);
  }
  return formatter;
}

/** The local date of the instant `ms` in `timeZone`. */
export function localDateOf(ms: number, timeZone: string): LocalDate {
  let y = 0;
  let m = 0;
  let d = 0;
  let bc = false;
  for (const part of formatterOf(timeZone).formatToParts(ms)) {
    if (part.type === "year") y = Number(part.value);
    else if (part.type === "month") m = Number(part.value);
    else if (part.type === "day") d = Number(part.value);
    else if (part.type === "era") bc = part.value.startsWith("B");
  }
  return { y: bc ? 1 - y : y, m, d };
}

/** A date as one comparable number. */
const ordinal = ({ y, m, d }: LocalDate): number => y * 10_000 + m * 100 + d;

/** The date `days` after `date` (negative: before), in the proleptic Gregorian calendar. */
function addDays({ y, m, d }: LocalDate, days: number): LocalDate {
  const t = new Date(Date.UTC(2000, 0, 1));
  t.setUTCFullYear(y, m - 1, d + days);
  return { y: t.getUTCFullYear(), m: t.getUTCMonth() + 1, d: t.getUTCDate() };
}

/** Days in month `m` of year `y`. */
const daysIn = (y: number, m: number): number => {
  const t = new Date(Date.UTC(2000, 0, 1));
  t.setUTCFullYear(y, m, 0);
  return t.getUTCDate();
};

/** The date as if it were UTC midnight, ms. */
const wallMs = ({ y, m, d }: LocalDate): number => {
  const t = new Date(Date.UTC(2000, 0, 1));
  t.setUTCFullYear(y, m - 1, d);
  return t.getTime();
};

/**
 * The first instant whose local date in `timeZone` is `date` or later: 00:00 local time, or the end of a DST
 * gap that swallowed it. Local dates never go backwards as instants go forward (a DST end that repeats an hour
 * repeats it within one date), so a binary search over the instants around the date's midnight finds it;
 * the zone's offset usually gives it at once.
 */
export function startOfDay(date: LocalDate, timeZone: string): number {
  const target = ordinal(date);
  const reached = (ms: number) => ordinal(localDateOf(ms, timeZone)) >= target;
  const wall = wallMs(date);
  // The usual case: midnight exists, at the wall time less the offset there.
  const guess = wall - offsetAt(wall - offsetAt(wall, timeZone), timeZone);
  if (reached(guess) && !reached(guess - 1)) return guess;
  // Offsets lie within -12 h … +14 h: the day starts in this bracket.
  let lo = wall - 15 * HOUR_MS; // not reached
  let hi = wall + 13 * HOUR_MS; // reached
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (reached(mid)) hi = mid;
    else lo = mid;
  }
  return hi;
}

/** One formatter per zone for the offset: the local wall time to the second. */
const clockFormatters = new Map<string, Intl.DateTimeFormat>();

/** The zone's offset from UTC at the instant `ms`, ms (local wall time less UTC). */
function offsetAt(ms: number, timeZone: string): number {
  let formatter = clockFormatters.get(timeZone);
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat("en-US", {
      timeZone,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
      era: "short",
    });
    clockFormatters.set(timeZone, formatter);
  }
  const at: Record<string, number> = {};
  let bc = false;
  for (const part of formatter.formatToParts(ms)) {
    if (part.type === "era") bc = part.value.startsWith("B");
    else if (part.type !== "literal") at[part.type] = Number(part.value);
  }
  const t = new Date(Date.UTC(2000, 0, 1));
  t.setUTCFullYear(bc ? 1 - (at.year ?? 0) : (at.year ?? 0), (at.month ?? 1) - 1, at.day ?? 1);
  t.setUTCHours(at.hour ?? 0, at.minute ?? 0, at.second ?? 0, 0);
  return t.getTime() - (ms - (((ms % 1000) + 1000) % 1000));
}

/** The first day of the period of `spec` that contains the local date `date`. */
function firstDayOf(spec: CalendarSpec, date: LocalDate): LocalDate {
  if (spec.unit === "day") return date;
  if (spec.unit === "week") {
    const mondayBased = (new Date(wallMs(date)).getUTCDay() + 6) % 7;
    return addDays(date, -((mondayBased - spec.anchor + 7) % 7));
  }
  const inMonth = Math.min(spec.anchor, daysIn(date.y, date.m));
  if (date.d >= inMonth) return { y: date.y, m: date.m, d: inMonth };
  const previous = date.m === 1 ? { y: date.y - 1, m: 12 } : { y: date.y, m: date.m - 1 };
  return { ...previous, d: Math.min(spec.anchor, daysIn(previous.y, previous.m)) };
}

/** The first day of the period after the one that starts on `first`. */
function nextFirstDay(spec: CalendarSpec, first: LocalDate): LocalDate {
  if (spec.unit === "day") return addDays(first, 1);
  if (spec.unit === "week") return addDays(first, 7);
  const next = first.m === 12 ? { y: first.y + 1, m: 1 } : { y: first.y, m: first.m + 1 };
  return { ...next, d: Math.min(spec.anchor, daysIn(next.y, next.m)) };
}

/** The boundaries around the instant `nowMs` (see {@link CalendarBounds}). */
export function boundsAround(spec: CalendarSpec, nowMs: number): CalendarBounds {
  const first = firstDayOf(spec, localDateOf(nowMs, spec.timeZone));
  // The period before: the one containing the day before this one's first.
  const previous = firstDayOf(spec, addDays(first, -1));
  const next = nextFirstDay(spec, first);
  return {
    previousStartMs: startOfDay(previous, spec.timeZone),
    startMs: startOfDay(first, spec.timeZone),
    endMs: startOfDay(next, spec.timeZone),
    nextEndMs: startOfDay(nextFirstDay(spec, next), spec.timeZone),
  };
}

/**
 * A rule's calendar period, its boundaries kept while the edge's clock stays in the current period: they are
 * worked out once per period per isolate, not per request.
 */
export class CalendarPeriod {
  private bounds: CalendarBounds | undefined;

  constructor(readonly spec: CalendarSpec) {}

  /** The boundaries around `nowMs`. */
  around(nowMs: number): CalendarBounds {
    const known = this.bounds;
    if (known !== undefined && nowMs >= known.startMs && nowMs < known.endMs) return known;
    this.bounds = boundsAround(this.spec, nowMs);
    return this.bounds;
  }
}
