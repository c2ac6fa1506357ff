/**
 * A rule's calendar period (docs/counting.md, "Calendar periods"): `period = "calendar:day|week|month"` on a
 * rule whose algorithm takes one (fixed-window), with `timezone` (IANA, default UTC) and `anchor` (the first
 * day: 1–31 for months, default 1; monday … sunday for weeks, default monday). Checked once, every problem
 * named by its field.
 */
import { namesWith, traitsOf } from "../engine/algorithms";
import type { Algorithm } from "../engine/types";
import { CalendarPeriod, type CalendarUnit, isTimeZone, WEEKDAYS } from "../util/calendar";
import { ConfigError } from "./errors";
import { show } from "./fields";

/** The fields of a rule that make its calendar period, as the schema leaves them. */
interface CalendarFields {
  algorithm: Algorithm;
  period?: number | { calendar: CalendarUnit } | undefined;
  timezone?: string | undefined;
  anchor?: number | string | undefined;
  tiers?: Record<string, { period?: number | undefined }> | undefined;
}

/** A calendar period's nominal length, ms: what the rule's `periodMs` says until a request finds the real one. */
export const NOMINAL_MS: Readonly<Record<CalendarUnit, number>> = {
  day: 86_400_000,
  week: 7 * 86_400_000,
  month: 31 * 86_400_000,
};

/** The rule's calendar period, or `undefined` for a rule of durations (which may set neither zone nor anchor). */
export function calendarOf(rule: CalendarFields, at: string): CalendarPeriod | undefined {
  const unit = typeof rule.period === "object" ? rule.period.calendar : undefined;
  if (unit === undefined) {
    const stray = (["timezone", "anchor"] as const).filter((field) => rule[field] !== undefined);
    if (stray.length > 0) {
      throw new ConfigError(
        stray.map(
          (field) =>
            `${at}.${field}: only a calendar period has a ${field === "timezone" ? "time zone" : "first day"} (period = "calendar:day" | "calendar:week" | "calendar:month")`,
        ),
      );
    }
    return undefined;
  }
  const problems: string[] = [];
  if (!traitsOf(rule.algorithm).calendarPeriods) {
    problems.push(
      `${at}.period: a calendar period is for ${namesWith("calendarPeriods")} rules (this one is ${rule.algorithm})`,
    );
  }
  const timeZone = rule.timezone ?? "UTC";
  if (!isTimeZone(timeZone)) {
    problems.push(
      `${at}.timezone: ${show(rule.timezone)} is not a time zone (an IANA name such as "Europe/Paris")`,
    );
  }
  const anchor = anchorOf(unit, rule.anchor, `${at}.anchor`, problems);
  for (const [name, tier] of Object.entries(rule.tiers ?? {})) {
    if (tier.period !== undefined) {
      problems.push(`${at}.tiers.${name}.period: a tier of a calendar rule keeps the rule's period`);
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return new CalendarPeriod({ unit, timeZone, anchor });
}

/** The anchor as a number (a month's day 1–31, a week's days after Monday 0–6, a day's 0), or a problem. */
function anchorOf(
  unit: CalendarUnit,
  anchor: number | string | undefined,
  field: string,
  problems: string[],
): number {
  if (unit === "day") {
    if (anchor !== undefined)
      problems.push(`${field}: a calendar:day period has no anchor (it starts at 00:00)`);
    return 0;
  }
  if (unit === "week") {
    if (anchor === undefined) return 0;
    const day = typeof anchor === "string" ? WEEKDAYS.indexOf(anchor.trim().toLowerCase() as never) : -1;
    if (day < 0) problems.push(`${field}: ${show(anchor)} is not a day of the week (monday … sunday)`);
    return Math.max(day, 0);
  }
  if (anchor === undefined) return 1;
  const day = typeof anchor === "string" && /^\s*\d+\s*$/.test(anchor) ? Number(anchor) : anchor;
  if (typeof day !== "number" || !Number.isInteger(day) || day < 1 || day > 31) {
    problems.push(
      `${field}: ${show(anchor)} is not a day of the month (1 to 31; a shorter month starts on its last day)`,
    );
    return 1;
  }
  return day;
}
