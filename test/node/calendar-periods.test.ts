// Calendar periods (docs/counting.md, "Calendar periods"): the boundaries the edge works out (src/util/calendar.ts)
// against a reference written apart from it, a scan of every quarter hour of three years in five time zones
// (DST starting and ending, at 02:00 and at midnight, a half-hour DST, a zone without DST; a month anchored on
// the 31st through February), then the script picking the period by Redis's clock, and the config's errors.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, parseRules } from "../../src/config";
import { stateKey } from "../../src/engine/keys";
import type { Store } from "../../src/engine/store";
import type { RuleCall } from "../../src/engine/types";
import { boundsAround, type CalendarSpec, WEEKDAYS } from "../../src/util/calendar";
import { directRedis, requestId, ruleCall, testStore, uniquePrefix } from "./lua-support";

const ZONES = [
  "America/New_York",
  "Europe/Berlin",
  "America/Santiago",
  "Australia/Lord_Howe",
  "Asia/Kolkata",
];
const FROM = Date.UTC(2026, 0, 1);
const TO = Date.UTC(2029, 0, 1); // three years, February 2028 has 29 days
const STEP = 15 * 60_000; // every offset and DST change of these zones is on a quarter hour

/**
 * The reference: the instants at which each local date begins, found by scanning every quarter hour and noting
 * where the date (as `sv-SE` formats it, "YYYY-MM-DD") differs from the step before. Nothing of the code under
 * test is used.
 */
function dayStarts(timeZone: string): { date: string; at: number }[] {
  const format = new Intl.DateTimeFormat("sv-SE", {
    timeZone,
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
  });
  const starts: { date: string; at: number }[] = [];
  let previous = format.format(FROM - 40 * 86_400_000 - STEP);
  for (let at = FROM - 40 * 86_400_000; at < TO + 70 * 86_400_000; at += STEP) {
    const date = format.format(at);
    if (date !== previous) starts.push({ date, at });
    previous = date;
  }
  return starts;
}

/** The reference's period starts for `spec`: the day starts whose date opens a period. */
function periodStarts(spec: CalendarSpec, days: { date: string; at: number }[]): number[] {
  return days
    .filter(({ date }, i) => {
      const [y, m, d] = date.split("-").map(Number) as [number, number, number];
      if (spec.unit === "day") return true;
      if (spec.unit === "week") {
        // Days of the week counted from a known Monday (2024-01-01), in whole days of the calendar.
        const days = Math.round((Date.UTC(y, m - 1, d) - Date.UTC(2024, 0, 1)) / 86_400_000);
        return ((days % 7) + 7) % 7 === spec.anchor;
      }
      // The month's last day is the one the scan saw before a day 1.
      const next = days[i + 1]?.date;
      const lastOfMonth = next?.endsWith("-01") === true;
      return d === spec.anchor || (lastOfMonth && d < spec.anchor);
    })
    .map(({ at }) => at);
}

const SPECS: Omit<CalendarSpec, "timeZone">[] = [
  { unit: "day", anchor: 0 },
  { unit: "week", anchor: 0 },
  { unit: "week", anchor: 6 },
  { unit: "month", anchor: 1 },
  { unit: "month", anchor: 15 },
  { unit: "month", anchor: 31 },
];

describe("calendar boundaries against a scan of three years", () => {
  for (const timeZone of ZONES) {
    it(`${timeZone}: every period of every unit starts where the scan says, around each boundary`, () => {
      const days = dayStarts(timeZone);
      // The zone really changes its offset (DST) where it should: days of 23 and 25 hours (or 23.5/24.5).
      const lengths = new Set(days.slice(1).map((d, i) => d.at - (days[i] as { at: number }).at));
      if (timeZone !== "Asia/Kolkata") expect(lengths.size).toBeGreaterThanOrEqual(3);
      for (const shape of SPECS) {
        const spec = { ...shape, timeZone };
        const starts = periodStarts(spec, days);
        let checked = 0;
        for (let k = 1; k + 2 < starts.length; k++) {
          const previous = starts[k - 1] as number;
          const start = starts[k] as number;
          const end = starts[k + 1] as number;
          const next = starts[k + 2] as number;
          if (start < FROM || start >= TO) continue;
          const expected = { previousStartMs: previous, startMs: start, endMs: end, nextEndMs: next };
          for (const at of [start, start + 1, Math.floor((start + end) / 2), end - 1]) {
            expect(
              boundsAround(spec, at),
              `${spec.unit}/${spec.anchor} at ${new Date(at).toISOString()}`,
            ).toEqual(expected);
          }
          checked++;
        }
        expect(checked).toBeGreaterThan(shape.unit === "month" ? 30 : 150);
      }
    }, 120_000);
  }

  it("starts a day skipped at midnight by DST at the end of the gap, and a month anchored on the 31st on February's last day", () => {
    // America/Santiago: clocks go from 2026-09-06 00:00 to 01:00 (-04 → -03); that day starts at 01:00 local.
    const santiago: CalendarSpec = { unit: "day", timeZone: "America/Santiago", anchor: 0 };
    expect(new Date(boundsAround(santiago, Date.UTC(2026, 8, 6, 12)).startMs).toISOString()).toBe(
      "2026-09-06T04:00:00.000Z",
    );
    // And back on 2026-04-05 at 00:00 -03 to 2026-04-04 23:00 -04: the 4th lasts 25 hours.
    const fourth = boundsAround(santiago, Date.UTC(2026, 3, 4, 12));
    expect(fourth.endMs - fourth.startMs).toBe(25 * 3_600_000);
    const month: CalendarSpec = { unit: "month", timeZone: "UTC", anchor: 31 };
    const february = boundsAround(month, Date.UTC(2028, 1, 15, 12));
    expect(new Date(february.startMs).toISOString()).toBe("2028-01-31T00:00:00.000Z");
    expect(new Date(february.endMs).toISOString()).toBe("2028-02-29T00:00:00.000Z");
    expect(new Date(february.nextEndMs).toISOString()).toBe("2028-03-31T00:00:00.000Z");
  });
});

describe("the script picks the period by Redis's clock", () => {
  let store: Store;
  const redis = directRedis();
  const prefix = uniquePrefix("calendar");
  beforeAll(() => {
    store = testStore(prefix);
  });
  afterAll(() => redis.quit());

  /** Redis's clock, ms. */
  const redisNow = async () => {
    const [s, us] = await redis.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  };

  it("counts in the period Redis's now is in, resets at its end, and says how long until then", async () => {
    const spec: CalendarSpec = { unit: "day", timeZone: "America/Santiago", anchor: 0 };
    const now = await redisNow();
    const bounds = boundsAround(spec, now);
    const call: RuleCall = {
      ...ruleCall({ algorithm: "fixed-window", limit: 2, periodMs: bounds.endMs - bounds.startMs }),
      calendar: bounds,
    };
    // Redis's clock moved to 3 s before the period's end (the edge sent the bounds around its own now).
    const beforeEnd = bounds.endMs - 3000 - now;
    const first = await store.decide([call], requestId(), { timeOffsetMs: beforeEnd });
    expect(first.allowed).toBe(true);
    expect(first.results[0]?.resetAfterMs).toBeGreaterThan(1000);
    expect(first.results[0]?.resetAfterMs).toBeLessThanOrEqual(3000);
    expect(first.results[0]?.periodMs).toBe(bounds.endMs - bounds.startMs);
    const key = stateKey(prefix, call.rule, call.identityHash);
    expect(Math.abs((await redis.pttl(key)) - (bounds.endMs - (await redisNow()) - beforeEnd))).toBeLessThan(
      200,
    );
    await store.decide([call], requestId(), { timeOffsetMs: beforeEnd });
    const third = await store.decide([call], requestId(), { timeOffsetMs: beforeEnd });
    expect(third.allowed).toBe(false);
    expect(third.results[0]?.retryAfterMs).toBeLessThanOrEqual(3000);
    // Redis's clock past the end, the same bounds sent: the next period, a fresh count, its own length.
    const afterEnd = bounds.endMs + 1000 - now;
    await redis.del(key); // its expiry is on Redis's real clock, which did not travel
    const next = await store.decide([call], requestId(), { timeOffsetMs: afterEnd });
    expect(next.allowed).toBe(true);
    expect(next.results[0]?.remaining).toBe(1);
    expect(next.results[0]?.periodMs).toBe(bounds.nextEndMs - bounds.endMs);
    // Until the next period's end: its length less the second in and the time this test took since `now`.
    const nextLength = bounds.nextEndMs - bounds.endMs;
    expect(next.results[0]?.resetAfterMs).toBeLessThanOrEqual(nextLength - 1000);
    expect(next.results[0]?.resetAfterMs).toBeGreaterThan(nextLength - 1000 - 10_000);
  });

  it("does not count on another period's counter, and answers an error when its clock is outside the bounds", async () => {
    const spec: CalendarSpec = { unit: "week", timeZone: "Europe/Berlin", anchor: 0 };
    const now = await redisNow();
    const bounds = boundsAround(spec, now);
    const call: RuleCall = {
      ...ruleCall({ algorithm: "fixed-window", limit: 5, periodMs: bounds.endMs - bounds.startMs }),
      calendar: bounds,
    };
    const key = stateKey(prefix, call.rule, call.identityHash);
    // A counter of 5 that expires an hour from now: not this week's (unless the week ends then).
    await redis.set(key, "5", "PX", 3_600_000);
    const decided = await store.decide([call], requestId());
    expect(decided.allowed).toBe(true);
    expect(decided.results[0]?.remaining).toBe(4);
    await expect(
      store.decide([call], requestId(), { timeOffsetMs: bounds.nextEndMs + 1000 - now }),
    ).rejects.toThrow(/calendar bounds/);
  });
});

describe("calendar config", () => {
  const parse = (rule: Record<string, unknown>) => () =>
    parseRules([{ name: "r", key: "ip", algorithm: "fixed-window", limit: 5, ...rule }], {
      label: "RATE_LIMIT_RULES",
      jwtVerifiable: false,
    });

  it("accepts each unit, a zone and an anchor", () => {
    expect(
      parse({ period: "calendar:month", timezone: "Asia/Tokyo", anchor: 31 })()[0]?.calendar?.spec,
    ).toEqual({
      unit: "month",
      timeZone: "Asia/Tokyo",
      anchor: 31,
    });
    expect(parse({ period: "calendar:week", anchor: "Sunday" })()[0]?.calendar?.spec).toEqual({
      unit: "week",
      timeZone: "UTC",
      anchor: WEEKDAYS.indexOf("sunday"),
    });
    expect(parse({ period: "calendar:day" })()[0]?.lease).toBe(false);
  });

  it.each([
    [{ period: "calendar:year" }, /RATE_LIMIT_RULES\[0\]\.period: "calendar:year" is not a calendar period/],
    [{ period: "calendar:day", timezone: "Mars/Olympus" }, /\.timezone: "Mars\/Olympus" is not a time zone/],
    [{ period: "calendar:month", anchor: 32 }, /\.anchor: 32 is not a day of the month \(1 to 31/],
    [{ period: "calendar:month", anchor: 0 }, /\.anchor: 0 is not a day of the month/],
    [{ period: "calendar:week", anchor: "mon" }, /\.anchor: "mon" is not a day of the week/],
    [{ period: "calendar:day", anchor: 1 }, /\.anchor: a calendar:day period has no anchor/],
    [{ period: "1h", timezone: "UTC" }, /\.timezone: only a calendar period has a time zone/],
    [
      { period: "calendar:month", algorithm: "token-bucket" },
      /\.period: a calendar period is for fixed-window rules \(this one is token-bucket\)/,
    ],
    [
      { period: "calendar:month", tier: "header:x-plan", tiers: { pro: { period: "1h" } } },
      /\.tiers\.pro\.period: a tier of a calendar rule keeps the rule's period/,
    ],
  ])("refuses %j, naming the field", (rule, message) => {
    expect(parse(rule)).toThrow(ConfigError);
    expect(parse(rule)).toThrow(message);
  });
});
