/**
 * The admin API's request bodies, validated with valibot (the config's schema library). A body that does
 * not fit is a 400 whose `detail` names the field.
 */
import * as v from "valibot";
import { MAX_PERIOD_MS, MIN_PERIOD_MS, parseDurationMs } from "../config/duration";
import { MAX_UNITS } from "../config/fields";
import { MODES } from "../engine/types";
import { badRequest } from "./problem";

/** The longest TTL an override may have: ten years, in seconds (beyond that, omit `ttl`). */
const MAX_TTL_SECONDS = 10 * 365 * 86_400;

const quota = v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(MAX_UNITS));
const period = v.pipe(
  v.union([v.string(), v.number()]),
  v.check(
    (input) => parseDurationMs(input) !== undefined,
    'must be a period such as "30s", "1m", "1h", "1d" or a whole number of seconds',
  ),
  v.transform((input) => parseDurationMs(input) as number),
  v.minValue(MIN_PERIOD_MS, "must be at least 1s"),
  v.maxValue(MAX_PERIOD_MS, "must be at most 30d"),
);

/** `PUT /overrides/:rule/:identity`: `{ limit, period?, burst?, ttl? }` (unknown members are an error). */
export const OverrideBody = v.strictObject({
  limit: quota,
  /** In the rule syntax; absent = the rule's own period. */
  period: v.optional(period),
  /** Absent = the override's `limit`. */
  burst: v.optional(quota),
  /** Seconds until the override expires; absent = until deleted. */
  ttl: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(MAX_TTL_SECONDS))),
});

/** The longest a live global switch may be given to lapse after: 30 days, in seconds. */
const MAX_SWITCH_TTL_SECONDS = 30 * 86_400;

/**
 * `PUT /mode`: `{ mode: "on" | "off" | "monitor" | null, rule?, ttl? }`; `null` clears the live switch;
 * `ttl` (seconds, the global switch only) makes it lapse by itself.
 */
export const ModeBody = v.pipe(
  v.strictObject({
    mode: v.nullable(v.picklist(MODES)),
    rule: v.optional(v.string()),
    ttl: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(MAX_SWITCH_TTL_SECONDS))),
  }),
  v.check(
    (body) => body.ttl === undefined || (body.rule === undefined && body.mode !== null),
    "ttl applies to setting the global switch only (no rule, a mode that is not null)",
  ),
);

/** Reads and validates a JSON body; throws a 400 naming the first wrong field. */
export async function parseBody<S extends v.GenericSchema>(
  request: Request,
  schema: S,
): Promise<v.InferOutput<S>> {
  let body: unknown;
  try {
    body = await request.json();
  } catch {
    throw badRequest("The body must be JSON.");
  }
  const result = v.safeParse(schema, body);
  if (result.success) return result.output;
  const issue = result.issues[0];
  const path = issue.path?.map((item: { key: unknown }) => String(item.key)).join(".");
  throw badRequest(path ? `${path}: ${issue.message}` : `body: ${issue.message}`);
}
