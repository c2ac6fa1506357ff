/**
 * A rule's `match` (docs/matching.md, docs/lists.md): which requests it applies to, each field checked so that
 * a value that can never match a request is refused by name.
 */
import * as v from "valibot";
import { parsePrefix } from "../util/address";
import { flag, show, unknownField } from "./fields";

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

export const matchSchema = v.strictObject(
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
