/**
 * The shape of one rule (README: "Rules"), as a valibot schema. Each check carries its own message, so a
 * config error reads like `RATE_LIMIT_RULES[2].period: "1 fortnight" is not a duration`.
 * Semantic checks that need more than one field (unique names: `rules.ts`; a jwt key needs a verifier: `counting-rule.ts`) live there.
 */
import * as v from "valibot";
import { ALGORITHMS, FAILURES, MODES } from "../engine/types";
import { parsePrefix } from "../util/address";
import { MAX_PERIOD_MS, MIN_PERIOD_MS, parseDurationMs } from "./duration";

/** A value as a config message quotes it: JSON, cut at 80 characters. */
export const show = (input: unknown): string => {
  const text = JSON.stringify(input);
  return text === undefined ? String(input) : text.length > 80 ? `${text.slice(0, 77)}...` : text;
};

/** The characters of an RFC 9110 `token`, which a header name is. */
const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
/** A header name per RFC 9110 `token`. */
export const HEADER_NAME = new RegExp(`^${TOKEN}$`);

/** The request facts a `cf:` key part can name (read from `request.cf`: src/identity/cf.ts). */
export const CF_FIELDS = ["country", "asn", "colo", "ja4"] as const;
export type CfField = (typeof CF_FIELDS)[number];

/**
 * `ip` | `ip/64` | `global` | `header:<name>` | `query:<name>` | `jwt:<claim>` | `cf:<fact>` (src/identity/cf.ts)
 * | `cookie:<name>` (a cookie name is an RFC 9110 token too).
 */
export const KEY_SOURCE = new RegExp(
  `^(?:ip|ip/64|global|header:${TOKEN}|query:.+|jwt:[^\\s]+|cf:(?:${CF_FIELDS.join("|")})|cookie:${TOKEN})$`,
);
/** The key forms, as a config message lists them. */
const KEY_FORMS = `ip | ip/64 | header:<name> | query:<name> | jwt:<claim> | cf:${CF_FIELDS.join("|cf:")} | cookie:<name> | global`;

const keySource = v.pipe(
  v.string((i) => `${show(i.input)} is not a key (${KEY_FORMS})`),
  v.regex(KEY_SOURCE, (i) => `${show(i.input)} is not a key (${KEY_FORMS})`),
);

const keyField = v.union(
  [
    keySource,
    v.pipe(
      v.array(keySource),
      v.minLength(1, "an empty array is not a key"),
      v.maxLength(8, "at most 8 parts"),
    ),
  ],
  (i) => `${show(i.input)} is not a key (${KEY_FORMS}, or an array of those)`,
);

const positiveInt = (max: number) =>
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
const rulePeriod = v.pipe(
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

/**
 * Where a rule's real cost comes from in the response (`settle`): a response header, or a number at a dot path
 * of a JSON body or of a server-sent event's JSON data (docs/settle.md).
 */
export const SETTLE_SOURCE = new RegExp(`^(?:header:${TOKEN}|(?:json|sse):[^.\\s]+(?:\\.[^.\\s]+)*)$`);

/** The largest limit, burst or cost (keeps every Redis integer exact). */
export const MAX_UNITS = 1_000_000_000;

const picklist = <T extends string>(options: readonly [T, ...T[]]) =>
  v.picklist(options, (i) => `${show(i.input)} is not one of ${options.join(" | ")}`);

/** Values of an on/off setting (`RATE_LIMIT_LEASES` and the middleware's `leases`, `RATE_LIMIT_REDIS_CLUSTER`). */
export const ON_OFF = ["on", "off"] as const;
/** The longest lease life `RATE_LIMIT_LEASE_MS` accepts, ms: a lease is a short-lived thing. */
export const MAX_LEASE_MS = 10_000;

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

/**
 * A strict object's own issues: a field it does not know (valibot expects "never" there), a required field
 * missing (it expects the key), or not an object at all.
 */
const unknownField = (i: v.BaseIssue<unknown>) =>
  i.expected === "never"
    ? `unknown field ${show(i.input)}`
    : i.expected?.startsWith('"')
      ? "required"
      : `expected a table of fields, not ${show(i.input)}`;

/** A `true` / `false` field. */
const flag = v.boolean((i) => `${show(i.input)} is not true or false`);

/**
 * Why a path pattern can never match a request's path, or `undefined`. A request's path has no query or
 * fragment, and its `.` and `..` segments are resolved before any rule sees it (src/rules/path.ts).
 */
function neverMatchingPath(pattern: string): string | undefined {
  if (pattern.includes("?")) return `contains "?": the query is not part of the path (%3F is a literal "?")`;
  if (pattern.includes("#"))
    return `contains "#": the fragment never reaches the server (%23 is a literal "#")`;
  const dots = pattern.split("/").find((segment) => segment === "." || segment === "..");
  if (dots !== undefined) return `has a "${dots}" segment: a request's path is resolved before it is matched`;
  return undefined;
}

/** Most values one `match` field may list (`ip`, `country`, `asn`, `user_agent`): longer sets belong in a live list. */
export const MAX_MATCH_VALUES = 1000;

/** A list of at least one value, at most {@link MAX_MATCH_VALUES}. */
const nonEmptyList = <T extends v.GenericSchema>(item: T, what: string) =>
  v.pipe(
    v.array(item, (i) => `${show(i.input)} is not a list of ${what}`),
    v.minLength(1, `an empty list matches no request (leave the field out to match every request)`),
    v.maxLength(
      MAX_MATCH_VALUES,
      `more than ${MAX_MATCH_VALUES} ${what}: put them in a live list (docs/lists.md)`,
    ),
  );

/** `match.ip`: an address or a CIDR (IPv4, IPv6); its host bits must be zero. */
const ipEntry = v.pipe(
  v.string((i) => `${show(i.input)} is not an IP address or CIDR`),
  v.rawCheck(({ dataset, addIssue }) => {
    if (!dataset.typed) return;
    const prefix = parsePrefix(dataset.value.trim());
    if (typeof prefix === "string") addIssue({ message: prefix });
  }),
);

/** `match.country`: the two-letter code Cloudflare puts in `request.cf.country` (ISO 3166-1; `T1` for Tor, `XX` unknown). */
const countryCode = v.pipe(
  v.string((i) => `${show(i.input)} is not a country code`),
  v.regex(/^[A-Za-z][A-Za-z0-9]$/, (i) => `${show(i.input)} is not a two-character country code (e.g. "DE")`),
  v.transform((code) => code.toUpperCase()),
);

/** `match.asn`: an autonomous system number, as in `request.cf.asn`. */
const asnNumber = v.pipe(
  v.number((i) => `${show(i.input)} is not an AS number`),
  v.check(
    (n) => Number.isInteger(n) && n >= 0 && n <= 4_294_967_295,
    (i) => `${show(i.input)} is not an AS number (a whole number from 0 to 4294967295)`,
  ),
);

/** Longest `match.user_agent` pattern: a glob runs on every request, its time proportional to its length. */
const MAX_GLOB_LENGTH = 256;

/** `match.user_agent`: a case-insensitive glob, `*` any characters. */
const userAgentGlob = v.pipe(
  v.string((i) => `${show(i.input)} is not a User-Agent pattern`),
  v.minLength(1, 'an empty pattern matches only an empty User-Agent: use "*" for any'),
  v.maxLength(MAX_GLOB_LENGTH, `longer than ${MAX_GLOB_LENGTH} characters`),
);

/** A live list's name (docs/lists.md): it appears in the admin API's paths and in a Redis key. */
export const LIST_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** `match.list`: the name of a live list. */
const listName = v.pipe(
  v.string((i) => `${show(i.input)} is not a list name`),
  v.regex(LIST_NAME, (i) => `${show(i.input)} is not a list name ([A-Za-z0-9_-]{1,64})`),
);

const matchSchema = v.strictObject(
  {
    methods: v.optional(
      v.pipe(
        v.array(
          v.pipe(
            v.string("a method is a string"),
            v.regex(/^[A-Za-z]+$/, (i) => `${show(i.input)} is not a method`),
          ),
        ),
        v.minLength(1, "an empty list matches no request (leave methods out to match every method)"),
        v.transform((methods) => methods.map((m) => m.toUpperCase())),
      ),
    ),
    path: v.optional(
      v.pipe(
        v.string("a path is a string"),
        v.startsWith("/", (i) => `${show(i.input)} does not start with "/"`),
        v.rawCheck(({ dataset, addIssue }) => {
          const why = dataset.typed ? neverMatchingPath(dataset.value) : undefined;
          if (why !== undefined) addIssue({ message: `${show(dataset.value)} never matches: it ${why}` });
        }),
      ),
    ),
    host: v.optional(
      v.pipe(
        v.string("a host is a string"),
        v.regex(/^(\*\.)?[A-Za-z0-9.-]+(:\d+)?$/, (i) => `${show(i.input)} is not a host`),
      ),
    ),
    strict_slash: v.optional(flag),
    case_insensitive: v.optional(flag),
    method_override: v.optional(flag),
    ip: v.optional(nonEmptyList(ipEntry, "IP addresses or CIDRs")),
    country: v.optional(nonEmptyList(countryCode, "country codes")),
    asn: v.optional(nonEmptyList(asnNumber, "AS numbers")),
    user_agent: v.optional(nonEmptyList(userAgentGlob, "User-Agent patterns")),
    list: v.optional(listName),
  },
  unknownField,
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
