/**
 * The shape of one rule (README: "Rules"), as a valibot schema. Each check carries its own message, so a
 * config error reads like `RATE_LIMIT_RULES[2].period: "1 fortnight" is not a duration`.
 * Its parts: ./fields.ts (what every field is built of), ./source-fields.ts (key and settle sources),
 * ./period-fields.ts (periods, delays), ./match-schema.ts (`match`). Checks that need more than one field
 * (unique names, jwt keys need a verifier) live in `rules.ts` and `counting-rule.ts`.
 */
import * as v from "valibot";
import { ALGORITHMS, FAILURES, MODES } from "../engine/types";
import { flag, MAX_UNITS, picklist, positiveInt, show, TOKEN, unknownField } from "./fields";
import { matchSchema } from "./match-schema";
import { delayMs, periodMs, rulePeriod } from "./period-fields";
import { keyField, SETTLE_SOURCE } from "./source-fields";

/** Most sub-keys a `shed` rule's budget may be split over. */
export const MAX_SHARDS = 64;

/** A priority class's share of a `shed` rule's capacity: a fraction above 0, at most 1. */
const shareOfCapacity = v.pipe(
  v.number((i) => `${show(i.input)} is not a share of capacity (a number above 0, at most 1)`),
  v.check(
    (n) => n > 0 && n <= 1,
    (i) => `${show(i.input)} is not a share of capacity (a number above 0, at most 1)`,
  ),
);

const tierSchema = v.strictObject(
  {
    limit: v.optional(positiveInt(MAX_UNITS)),
    period: v.optional(periodMs),
    burst: v.optional(positiveInt(MAX_UNITS)),
  },
  unknownField,
);

/**
 * One entry of `count.status`: a 3-digit status code (`"401"`, or the number 401) or a class `"1xx"`…`"5xx"`
 * (docs/counting.md). Kept as a string: src/config/count.ts turns the list into a matcher.
 */
const statusEntry = v.pipe(
  v.union([v.string(), v.number()], (i) => `${show(i.input)} is not a status code ("401") or class ("4xx")`),
  v.transform((entry) => String(entry).trim().toLowerCase()),
  v.rawCheck(({ dataset, addIssue }) => {
    if (!dataset.typed || /^[1-5](\d\d|xx)$/.test(dataset.value)) return;
    const shown = show(dataset.value);
    addIssue({
      message: /^\d\d\d$/.test(dataset.value)
        ? `${shown} is not a status code (100 to 599)`
        : /^\dxx$/.test(dataset.value)
          ? `${shown} is not a status class (1xx, 2xx, 3xx, 4xx or 5xx)`
          : `${shown} is not a status code ("401") or class ("4xx")`,
    });
  }),
);

/** `count = { status = [...] }`: the rule is charged only for requests whose response status is listed. */
const countSchema = v.strictObject(
  {
    status: v.pipe(
      v.array(statusEntry, (i) => `${show(i.input)} is not a list of status codes or classes`),
      v.minLength(1, "an empty list counts no response (leave count out to count every request)"),
    ),
  },
  unknownField,
);

/** One rule as written in `RATE_LIMIT_RULES` (or passed to `rateLimit({ rules })`). */
export const ruleSchema = v.strictObject(
  {
    name: v.pipe(
      v.string("the name is required"),
      v.regex(/^[A-Za-z0-9_-]{1,64}$/, (i) => `${show(i.input)} is not a name ([A-Za-z0-9_-]{1,64})`),
    ),
    match: v.optional(matchSchema),
    key: keyField,
    algorithm: picklist(ALGORITHMS),
    limit: positiveInt(MAX_UNITS),
    period: v.optional(rulePeriod),
    timezone: v.optional(
      v.string((i) => `${show(i.input)} is not a time zone (an IANA name such as "Europe/Paris")`),
    ),
    anchor: v.optional(
      v.union(
        [v.number(), v.string()],
        (i) => `${show(i.input)} is not an anchor (a day of the month 1–31, or monday … sunday)`,
      ),
    ),
    burst: v.optional(positiveInt(MAX_UNITS)),
    cost: v.optional(
      v.union(
        [positiveInt(MAX_UNITS), v.pipe(v.string(), v.regex(new RegExp(`^header:${TOKEN}$`)))],
        (i) => `${show(i.input)} is not a cost (a whole number, or "header:<name>")`,
      ),
    ),
    delay: v.optional(delayMs),
    settle: v.optional(
      v.pipe(
        v.string(
          (i) => `${show(i.input)} is not a settle source (header:<name> | json:<dot.path> | sse:<dot.path>)`,
        ),
        v.regex(
          SETTLE_SOURCE,
          (i) => `${show(i.input)} is not a settle source (header:<name> | json:<dot.path> | sse:<dot.path>)`,
        ),
      ),
    ),
    priority: v.optional(
      v.union(
        [v.literal("method"), keyField],
        (i) =>
          `${show(i.input)} is not a priority source (method | ip | header:<name> | query:<name> | jwt:<claim> | cf:<fact> | cookie:<name>, or an array of those)`,
      ),
    ),
    priorities: v.optional(
      v.pipe(
        v.record(v.string(), shareOfCapacity),
        v.check((r) => Object.keys(r).length > 0, "name at least one priority class"),
      ),
    ),
    shards: v.optional(positiveInt(MAX_SHARDS)),
    tier: v.optional(keyField),
    tiers: v.optional(v.record(v.string(), tierSchema)),
    mode: v.optional(picklist(MODES)),
    failure: v.optional(picklist(FAILURES)),
    missing: v.optional(picklist(["ip", "skip", "deny"] as const)),
    lease: v.optional(flag),
    sync: v.optional(picklist(["exact", "async"] as const)),
    count: v.optional(countSchema),
    block: v.optional(periodMs),
  },
  unknownField,
);

/** What an action rule does: `deny` answers 403, `allow` exempts the request from every rule after it. */
export const ACTIONS = ["deny", "allow"] as const;

/**
 * A rule with an `action` instead of an `algorithm` (docs/lists.md): it counts nothing, so it has no limit,
 * period or any other counting field. `key` (default `ip`) names what a live list's identity entries are
 * compared with.
 */
export const actionRuleSchema = v.strictObject(
  {
    name: ruleSchema.entries.name,
    match: v.optional(matchSchema),
    action: picklist(ACTIONS),
    key: v.optional(keyField),
    mode: v.optional(picklist(MODES)),
  },
  unknownField,
);

/** A rule as a user writes it. */
export type RuleInput = v.InferInput<typeof ruleSchema>;
