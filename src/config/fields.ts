/**
 * What every config field's schema is built of: how a message quotes a value, whole numbers, one-of-a-list,
 * true/false, a strict table's own issues, and the bounds settings and rules share.
 */
import * as v from "valibot";

/** A value as a config message quotes it: JSON, cut at 80 characters. */
export const show = (input: unknown): string => {
  const text = JSON.stringify(input);
  return text === undefined ? String(input) : text.length > 80 ? `${text.slice(0, 77)}...` : text;
};

/** The characters of an RFC 9110 `token`, which a header name is. */
export const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
/** A header name per RFC 9110 `token`. */
export const HEADER_NAME = new RegExp(`^${TOKEN}$`);

/** A whole number from 1 to `max`, or a string of one. */
export const positiveInt = (max: number) =>
  v.pipe(
    v.union(
      [v.number(), v.pipe(v.string(), v.regex(/^\s*\d+\s*$/), v.transform(Number))],
      (i) => `${show(i.input)} is not a whole number`,
    ),
    v.check(
      (n) => Number.isInteger(n) && n >= 1 && n <= max,
      (i) => `${show(i.input)} is not a whole number from 1 to ${max}`,
    ),
  );

/** The largest limit, burst or cost (keeps every Redis integer exact). */
export const MAX_UNITS = 1_000_000_000;

/** One of `options`, naming them all when it is not. */
export const picklist = <T extends string>(options: readonly [T, ...T[]]) =>
  v.picklist(options, (i) => `${show(i.input)} is not one of ${options.join(" | ")}`);

/** Values of an on/off setting (`RATE_LIMIT_LEASES` and the middleware's `leases`, `RATE_LIMIT_REDIS_CLUSTER`). */
export const ON_OFF = ["on", "off"] as const;
/** The longest lease life `RATE_LIMIT_LEASE_MS` accepts, ms: a lease is a short-lived thing. */
export const MAX_LEASE_MS = 10_000;

/**
 * A strict object's own issues: a field it does not know (valibot expects "never" there), a required field
 * missing (it expects the key), or not an object at all.
 */
export const unknownField = (i: v.BaseIssue<unknown>) =>
  i.expected === "never"
    ? `unknown field ${show(i.input)}`
    : i.expected?.startsWith('"')
      ? "required"
      : `expected a table of fields, not ${show(i.input)}`;

/** A `true` / `false` field. */
export const flag = v.boolean((i) => `${show(i.input)} is not true or false`);
