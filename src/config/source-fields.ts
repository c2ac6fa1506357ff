/**
 * Where a rule reads a request, as written: a key (or tier, or shed priority) source and a settle source.
 * src/config/sources.ts parses what these accept.
 */
import * as v from "valibot";
import { show, TOKEN } from "./fields";

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

export const keyField = v.union(
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

/**
 * Where a rule's real cost comes from in the response (`settle`): a response header, or a number at a dot path
 * of a JSON body or of a server-sent event's JSON data (docs/settle.md).
 */
export const SETTLE_SOURCE = new RegExp(`^(?:header:${TOKEN}|(?:json|sse):[^.\\s]+(?:\\.[^.\\s]+)*)$`);
