/**
 * The limiter's request-time outcomes (README "Rules", "Responses"; docs/failure-modes.md): 400 for a bad cost, 401 for a missing
 * identity under `missing = "deny"`, 429 when a rule denies, 503 when Redis cannot decide and a rule fails
 * closed. Each is a `ProblemError` (an `HTTPException`): the middleware throws it, and the app's
 * `onError` (or Hono's default) answers with its problem+json. Types are the IANA ones of the RateLimit
 * draft for 429/503 and `about:blank` (title = the status phrase) otherwise.
 */
import { MAX_UNITS } from "../config/fields";
import type { DegradedReason } from "../engine/types";
import { ProblemError } from "../util/problem";

const IANA = "https://iana.org/assignments/http-problem-types";

/** 400: the request's cost (e.g. a `cost = "header:x-rows"` value) is not a positive integer ≤ 1e9. */
export class InvalidCostError extends ProblemError {
  override readonly name = "InvalidCostError";
  constructor(rule: string, source: string, value: unknown) {
    super(
      400,
      "about:blank",
      "Bad Request",
      `Rule "${rule}": the cost from ${source} must be a whole number from 1 to ${MAX_UNITS}, got ${JSON.stringify(String(value)).slice(0, 40)}.`,
    );
  }
}

/** 401: a rule with `missing = "deny"` found no value for its key (no header, no valid JWT, ...). */
export class MissingIdentityError extends ProblemError {
  override readonly name = "MissingIdentityError";
  /**
   * @param keyText the rule's key as written (`header:x-api-key`, `jwt:sub|ip`), or `undefined` for a key
   *   function (`rateLimit()`'s `key: (c) => …`): the app computes that key, so there is no source to name,
   *   and the body's `key` member says `"function"`.
   */
  constructor(rule: string, keyText: string | undefined) {
    const headers: Record<string, string> = keyText?.includes("jwt:")
      ? { "WWW-Authenticate": 'Bearer realm="floodgate"' }
      : {};
    super(
      401,
      "about:blank",
      "Unauthorized",
      keyText === undefined
        ? `Rule "${rule}" needs a key, and its key function returned no value for this request.`
        : `Rule "${rule}" needs ${keyText} and the request has none (or it is not valid).`,
      headers,
      { key: keyText ?? "function" },
    );
  }
}

/**
 * 403: an action rule with `action = "deny"` matched the request (docs/lists.md). The body names the rule in
 * `detail` and in `rule`, as a 429 names its policy; nothing was counted.
 */
export class DeniedByRuleError extends ProblemError {
  override readonly name = "DeniedByRuleError";
  constructor(rule: string) {
    super(403, "about:blank", "Forbidden", `Rule "${rule}" denies this request.`, {}, { rule });
  }
}

/**
 * A rule whose capacity (a window's limit, a bucket's burst, after tier and override) is below the request's
 * cost: no wait lets the request pass (docs/configuration.md, "Responses").
 */
export interface CostAboveCapacity {
  rule: string;
  /** The units the request costs under this rule. */
  cost: number;
  /** The most the rule grants one request; `undefined` when an override's burst set it (only Redis knows it). */
  capacity: number | undefined;
}

/**
 * 429: one or more `on` rules deny the request (README: "Responses"). When some deny a cost above their
 * capacity (`neverPasses`), the `detail` says the request can never pass as it is and the body lists those
 * rules in `cost-exceeds-capacity`; `Retry-After` stays the one full period the README documents.
 */
export class QuotaExceededError extends ProblemError {
  override readonly name = "QuotaExceededError";
  constructor(
    violated: readonly string[],
    policy: string,
    retryAfterSeconds: number,
    headers: Record<string, string>,
    neverPasses: readonly CostAboveCapacity[] = [],
  ) {
    super(
      429,
      `${IANA}#quota-exceeded`,
      "Too Many Requests",
      neverPasses.length > 0
        ? neverPassesDetail(neverPasses)
        : `Rate limit "${policy}" exceeded; retry in ${retryAfterSeconds} second${retryAfterSeconds === 1 ? "" : "s"}.`,
      { ...headers, "Retry-After": String(retryAfterSeconds) },
      {
        "violated-policies": violated,
        policy,
        retry_after: retryAfterSeconds,
        ...(neverPasses.length > 0 ? { "cost-exceeds-capacity": neverPasses.map((r) => r.rule) } : {}),
      },
    );
  }
}

/** "This request can never pass: it costs 11 units and rule "rows" grants at most 10 at once; …". */
function neverPassesDetail(rules: readonly CostAboveCapacity[]): string {
  const each = rules.map(({ rule, cost, capacity }) =>
    capacity === undefined
      ? `it costs ${cost} units, more than rule "${rule}" can ever grant at once`
      : `it costs ${cost} unit${cost === 1 ? "" : "s"} and rule "${rule}" grants at most ${capacity} at once`,
  );
  return `This request can never pass as it is: ${each.join("; ")}. No wait lets it in; send it with a lower cost.`;
}

/**
 * 503: a `shed` rule shed the request to protect the origin (docs/algorithms.md, "Priority load shedding"). Not a 429:
 * the client did nothing wrong, the origin is near capacity.
 */
export class LoadShedError extends ProblemError {
  override readonly name = "LoadShedError";
  constructor(rules: readonly string[], priorityClass: string | undefined, retryAfterSeconds: number) {
    super(
      503,
      `${IANA}#temporary-reduced-capacity`,
      "Service Unavailable",
      `The service is near capacity and sheds ${priorityClass === undefined ? "this request" : `requests of priority "${priorityClass}"`} for now; retry in ${retryAfterSeconds} s.`,
      { "Retry-After": String(retryAfterSeconds) },
      {
        "violated-policies": rules,
        ...(priorityClass === undefined ? {} : { priority: priorityClass }),
        retry_after: retryAfterSeconds,
      },
    );
  }
}

/**
 * 503: Redis could not decide (or the JWKS a `jwt:` key needs could not be fetched) and a matched `on` rule fails
 * closed (docs/failure-modes.md).
 */
export class ReducedCapacityError extends ProblemError {
  override readonly name = "ReducedCapacityError";
  constructor(rules: readonly string[], retryAfterSeconds: number, reason: DegradedReason) {
    super(
      503,
      `${IANA}#temporary-reduced-capacity`,
      "Service Unavailable",
      `The rate limiter cannot decide right now (${reason}) and ${rules.map((r) => `"${r}"`).join(", ")} fail${rules.length === 1 ? "s" : ""} closed; retry in ${retryAfterSeconds} s.`,
      { "Retry-After": String(retryAfterSeconds) },
      { "violated-policies": rules, retry_after: retryAfterSeconds },
    );
  }
}
