/**
 * One counting rule, its schema checked: its fields checked against each other (a `delay` on a window rule, a
 * `jwt:` key with no verifier, `sync = "async"` where it cannot count later), defaults applied.
 */
import type * as v from "valibot";
import { ALGORITHMS, namesWith, traitsOf } from "../engine/algorithms";
import type { Algorithm } from "../engine/types";
import { calendarOf, NOMINAL_MS } from "./calendar";
import { statusCount } from "./count";
import { ConfigError, collecting } from "./errors";
import { DEFAULT_SLOT_LEASE_MS, type RuleConfig, type TierLimits } from "./rule-config";
import type { ruleSchema } from "./schema";
import { shedConfig } from "./shed";
import { parseKey, settleSource } from "./sources";
import { windowCapProblem } from "./window-cap";

/** One rule, its schema checked: its fields checked against each other, defaults applied. */
export function ruleConfig(
  rule: v.InferOutput<typeof ruleSchema>,
  at: string,
  label: string,
  jwtVerifiable: boolean,
): RuleConfig {
  const problems: string[] = [];
  const key = parseKey(rule.key);
  const tier = rule.tier === undefined ? undefined : parseKey(rule.tier);
  if (!jwtVerifiable) {
    for (const [field, parts] of [
      ["key", key],
      ["tier", tier ?? []],
    ] as const) {
      const jwt = parts.find((part) => part.kind === "jwt");
      if (jwt) {
        problems.push(
          `${at}.${field}: "jwt:${jwt.claim}" needs ${label === "RATE_LIMIT_RULES" ? "RATE_LIMIT_JWT_SECRET or RATE_LIMIT_JWKS_URL" : "jwt.secret or jwt.jwksUrl"} (unverified claims are forgeable)`,
        );
      }
    }
  }
  if ((rule.tiers === undefined) !== (rule.tier === undefined)) {
    problems.push(`${at}.${rule.tier === undefined ? "tiers" : "tier"}: "tier" and "tiers" go together`);
  }
  const traits = traitsOf(rule.algorithm);
  const shed = collecting(problems, () => shedConfig(rule, at));
  const calendar = collecting(problems, () => calendarOf(rule, at));
  if (rule.period === undefined && traits.needsPeriod) {
    problems.push(`${at}.period: required for ${rule.algorithm} (e.g. "1m")`);
  }
  if (rule.delay !== undefined && !traits.takesDelay) {
    problems.push(
      `${at}.delay: only ${namesWith("takesDelay")} rules can delay a request (this one is ${rule.algorithm})`,
    );
  }
  if (rule.count !== undefined && traits.holdsSlot) {
    problems.push(
      `${at}.count: a ${rule.algorithm} rule holds a slot while a request is in flight, whatever its response; count by status applies to window and bucket rules`,
    );
  }
  if (rule.settle !== undefined && !traits.settles) {
    problems.push(
      `${at}.settle: only ${namesWith("settles")} rules can settle a cost from the response (this one is ${rule.algorithm})`,
    );
  }
  if (rule.block !== undefined && !traits.takesBlock) {
    problems.push(
      `${at}.block: only a rule that counts (${namesWith("takesBlock")}) can block an identity; a ${rule.algorithm} slot frees as soon as a request ends`,
    );
  }
  // Counted afterwards, units in a batch: a state that counts units (what a lease can hold) and keeps no member
  // per request, and nothing that must be known at the request's decision (a reserved slot, a status, a settled
  // cost, a block, a period's bounds chosen by Redis's clock).
  if (rule.sync === "async") {
    const extra = [
      ["delay", rule.delay],
      ["count", rule.count],
      ["settle", rule.settle],
      ["block", rule.block],
      ["a calendar period", calendar],
    ].flatMap(([name, value]) => (value === undefined ? [] : [name]));
    if (!countsLater(rule.algorithm) || extra.length > 0) {
      const names = ALGORITHMS.filter(countsLater);
      problems.push(
        `${at}.sync: "async" is for ${names.slice(0, -1).join(", ")} and ${names.at(-1)} rules without delay, count, settle, block or a calendar period (this one is ${rule.algorithm}${extra.length > 0 ? ` with ${extra.join(", ")}` : ""})`,
      );
    }
  }
  const cap = traits.maxRequestsPerWindow;
  if (cap < Number.POSITIVE_INFINITY) {
    // One member per request in the window (src/config/window-cap.ts): the requests a limit lets in.
    const least = typeof rule.cost === "number" ? rule.cost : 1;
    const limits = [
      ["limit", rule.limit] as const,
      ...Object.entries(rule.tiers ?? {}).map(([name, tier]) => [`tiers.${name}.limit`, tier.limit] as const),
    ];
    for (const [field, limit] of limits) {
      const problem = limit === undefined ? undefined : windowCapProblem(limit, least, cap);
      if (problem) problems.push(`${at}.${field}: ${problem}`);
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
  const cost: RuleConfig["cost"] =
    typeof rule.cost === "string"
      ? { kind: "header", name: rule.cost.slice("header:".length) }
      : { kind: "units", units: rule.cost ?? 1 };
  const tiers: Record<string, TierLimits> = {};
  for (const [tierName, limits] of Object.entries(rule.tiers ?? {})) {
    tiers[tierName] = { limit: limits.limit, periodMs: limits.period, burst: limits.burst };
  }
  return {
    name: rule.name,
    match: rule.match ?? {},
    key,
    keyText: Array.isArray(rule.key) ? rule.key.join("|") : rule.key,
    algorithm: rule.algorithm,
    limit: rule.limit,
    periodMs:
      typeof rule.period === "object"
        ? NOMINAL_MS[rule.period.calendar]
        : (rule.period ?? DEFAULT_SLOT_LEASE_MS),
    burst: rule.burst ?? rule.limit,
    delayMs: rule.delay ?? 0,
    cost,
    tier,
    tiers,
    mode: rule.mode,
    failure: rule.failure,
    missing: rule.missing ?? "ip",
    ...(shed ? { shed } : {}),
    ...(rule.count ? { count: statusCount(rule.count.status) } : {}),
    ...(calendar ? { calendar } : {}),
    // A delayed request waits for a slot reserved in Redis, and a held slot is no unit: neither fits a lease.
    // A rule counting by status gives a request's units back after its response: Redis decides it, so the
    // units it gives back are the ones the decision took (docs/counting.md, "Leases").
    // A calendar period's bounds come with each request, and Redis picks among them: never leased either.
    // Nor a block: units leased before another isolate's denial started it would be spent inside it, so a
    // blocking rule is always decided in Redis, where the block is (docs/protect.md, "Penalty box").
    lease:
      (rule.lease ?? true) &&
      rule.delay === undefined &&
      rule.count === undefined &&
      calendar === undefined &&
      // A settled rule is decided by Redis: a lease's units are spent locally before any debt is known.
      rule.settle === undefined &&
      rule.block === undefined &&
      traits.leasable,
    sync: rule.sync ?? "exact",
    ...(rule.settle === undefined ? {} : { settle: settleSource(rule.settle) }),
    ...(rule.block === undefined ? {} : { blockMs: rule.block }),
  } satisfies RuleConfig;
}

/** Whether an algorithm's units can be counted after the request, in a batch (`sync = "async"`). */
const countsLater = (algorithm: Algorithm): boolean =>
  traitsOf(algorithm).leasable && !traitsOf(algorithm).storesRequestId;
