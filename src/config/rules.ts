/**
 * Validates rules (from `RATE_LIMIT_RULES` or `rateLimit({ rules })`) and resolves their defaults once,
 * into the `RuleConfig` every later stage reads. Nothing here runs per request.
 */
import * as v from "valibot";
import { ALGORITHMS, isAlgorithm, namesWith, traitsOf } from "../engine/algorithms";
import type { Algorithm, FailurePolicy, Mode } from "../engine/types";
import type { CalendarPeriod } from "../util/calendar";
import { calendarOf, NOMINAL_MS } from "./calendar";
import { type StatusCount, statusCount } from "./count";
import { ConfigError, collecting, configErrorFrom } from "./errors";
import { actionRuleSchema, type CfField, ruleSchema } from "./schema";
import { windowCapProblem } from "./window-cap";

/** One part of a key (or tier) source. */
export type KeyPart =
  | { kind: "ip" }
  | { kind: "ip64" }
  | { kind: "global" }
  | { kind: "header"; name: string }
  | { kind: "query"; name: string }
  | { kind: "jwt"; claim: string }
  /** A fact Cloudflare's edge set on the request (`request.cf`): src/identity/cf.ts. */
  | { kind: "cf"; field: CfField }
  /** A cookie's value, its name as written (cookie names are case-sensitive): src/identity/cookie.ts. */
  | { kind: "cookie"; name: string };

/**
 * Where a rule's real cost comes from in the response (`settle`, docs/settle.md): a response header, or a number
 * at a path of a JSON body (`json`) or of the last server-sent event whose JSON data carries it (`sse`).
 */
export type SettleSource =
  | { kind: "header"; name: string; text: string }
  | { kind: "json" | "sse"; path: string[]; text: string };

/** Per-tier values; absent fields fall back to the rule's own. */
export interface TierLimits {
  limit?: number;
  periodMs?: number;
  burst?: number;
}

/** A `shed` rule's priority classes (docs/algorithms.md, "Priority load shedding"). */
export interface ShedConfig {
  /** Where a request's class comes from: the method, or the same forms as `key`. */
  priority: "method" | KeyPart[];
  /** The priority source as written (`"method"`, `"header:x-priority"`, `"ip|jwt:plan"`), for messages. */
  priorityText: string;
  /** Class name → share of capacity above which the class is shed (1 = only at full capacity). */
  classes: Record<string, number>;
  /** The class of a request whose class is missing or unknown: the one shed first. */
  fallback: string;
  /** Sub-keys the budget is split over, each with its share (one key every request touches would serialize). */
  shards: number;
}

/** A validated rule with every default applied. */
export interface RuleConfig {
  name: string;
  /** As written: which requests the rule applies to, and how they are read (docs/matching.md). */
  match: {
    methods?: string[];
    path?: string;
    host?: string;
    /** A trailing slash makes another path (by default `/login/` is `/login`). */
    strict_slash?: boolean;
    /** The path's ASCII letters match in either case. */
    case_insensitive?: boolean;
    /** `false`: a request counts under its own method only, never the method it tunnels (src/rules/method.ts). */
    method_override?: boolean;
    /** Client addresses and CIDRs (docs/lists.md); an IPv4-mapped IPv6 client matches its IPv4 form. */
    ip?: string[];
    /** `request.cf.country` codes, upper case. */
    country?: string[];
    /** `request.cf.asn` numbers. */
    asn?: number[];
    /** Case-insensitive globs of the `User-Agent` header (`*`: any characters). */
    user_agent?: string[];
    /** A live list (docs/lists.md): its IP entries hold the client IP, its identity entries the rule's key. */
    list?: string;
  };
  /** The key's parts; more than one = a composite identity. */
  key: KeyPart[];
  /** The key as written (`"header:x-api-key"`, `"ip|jwt:sub"`), for messages. */
  keyText: string;
  algorithm: Algorithm;
  limit: number;
  /** Window length; for `concurrency`, the slot lease (when an unreleased slot is freed). */
  periodMs: number;
  burst: number;
  /** Token-bucket / GCRA: the longest a request over the rate is held for its slot instead of denied; 0 = deny. */
  delayMs: number;
  cost: { kind: "units"; units: number } | { kind: "header"; name: string };
  tier?: KeyPart[];
  tiers: Record<string, TierLimits>;
  /** Per-rule override of the global mode; `undefined` = follow the global mode. */
  mode?: Mode;
  failure?: FailurePolicy;
  missing: "ip" | "skip" | "deny";
  /** `shed` rules only. */
  shed?: ShedConfig;
  /** `false`: never decided from a lease (docs/leases.md); concurrency rules never are. */
  lease: boolean;
  /**
   * `async`: decided in the isolate from its last known state, counted in Redis after the response
   * (docs/going-global.md, "Async rules"). @default "exact"
   */
  sync?: "exact" | "async";
  /**
   * Charged only for requests whose response status it lists (docs/counting.md); absent = every request it
   * admits is charged.
   */
  count?: StatusCount;
  /**
   * A fixed-window rule over calendar periods (docs/counting.md, "Calendar periods"); `periodMs` is then the
   * period's nominal length, and each request gets the current one's (src/config/limits.ts).
   */
  calendar?: CalendarPeriod;
  /** Where the request's real cost comes from in its response (docs/settle.md); absent = its `cost` is final. */
  settle?: SettleSource;
  /**
   * How long a denial by this rule in mode `on` keeps the identity denied by it, ms (docs/protect.md,
   * "Penalty box"); absent = no block.
   */
  blockMs?: number;
}

/**
 * A rule with an `action` instead of an `algorithm` (docs/lists.md): `deny` answers 403 naming it, `allow`
 * exempts the request from every rule listed after it. Neither counts anything, so neither calls Redis.
 */
export interface ActionRule {
  name: string;
  action: "deny" | "allow";
  match: RuleConfig["match"];
  /** What a live list's identity entries are compared with; `ip` unless the rule says otherwise. */
  key: KeyPart[];
  keyText: string;
  /** Per-rule override of the global mode; `undefined` = follow the global mode. */
  mode?: Mode;
  /** How many counting rules are listed before it: it is evaluated just before `rules[before]`. */
  before: number;
}

/** The rules as written, split by kind: the counting rules, and the action rules with their places among them. */
export interface RuleSet {
  rules: RuleConfig[];
  actions: ActionRule[];
}

/** Default slot lease of a `concurrency` rule: when a slot held by a request that never finished is freed. */
export const DEFAULT_SLOT_LEASE_MS = 60_000;

/** Options that change what a valid rule is. */
export interface ParseRulesOptions {
  /** Names the source in messages: `RATE_LIMIT_RULES` for the Worker, `rules` for the middleware. */
  label: string;
  /** Whether `jwt:<claim>` keys can be verified (a secret or a JWKS URL is configured). */
  jwtVerifiable: boolean;
}

/**
 * Validates rules and applies defaults; throws a `ConfigError` naming what is wrong in every rule at once:
 * each rule's field errors, a name used twice, and, for a rule whose fields are each valid, what its fields
 * say against each other (a `delay` on a window rule, a `jwt:` key with no verifier).
 */
export function parseRules(input: unknown, options: ParseRulesOptions): RuleConfig[] {
  return parseRuleSet(input, options).rules;
}

/**
 * {@link parseRules}, keeping the action rules (docs/lists.md) too: every rule as written, split into the
 * counting rules and the action rules, each action rule knowing its place among the counting ones.
 */
export function parseRuleSet(input: unknown, { label, jwtVerifiable }: ParseRulesOptions): RuleSet {
  if (!Array.isArray(input)) {
    throw new ConfigError(`${label}: expected an array of rules (a TOML array of tables, or a JSON array)`);
  }
  if (input.length === 0) throw new ConfigError(`${label}: no rules, add at least one`);
  const problems: string[] = [];
  const seen = new Map<string, number>();
  const actions: ActionRule[] = [];
  let counted = 0;
  const rules = input.map((raw, index) => {
    const at = `${label}[${index}]`;
    if (isActionRule(raw)) {
      const name = raw.name;
      const first = typeof name === "string" ? seen.get(name) : undefined;
      if (first !== undefined) problems.push(`${at}.name: "${name}" is already used by ${label}[${first}]`);
      else if (typeof name === "string") seen.set(name, index);
      const action = collecting(problems, () => actionRule(raw, at, label, jwtVerifiable, counted));
      if (action) actions.push(action);
      return undefined;
    }
    counted++;
    const result = v.safeParse(ruleSchema, raw);
    if (!result.success) problems.push(...configErrorFrom(at, result.issues).problems);
    problems.push(...reservedNames(raw, at));
    const name = (raw as { name?: unknown } | null)?.name;
    const first = typeof name === "string" ? seen.get(name) : undefined;
    if (first !== undefined) problems.push(`${at}.name: "${name}" is already used by ${label}[${first}]`);
    else if (typeof name === "string") seen.set(name, index);
    if (!result.success) return undefined;
    const rule = result.output;
    return collecting(problems, () => ruleConfig(rule, at, label, jwtVerifiable));
  });
  if (problems.length > 0) throw new ConfigError(problems);
  return { rules: rules.filter((rule): rule is RuleConfig => rule !== undefined), actions };
}

/** Whether a rule as written is an action rule: it names an `action` (it may wrongly name an `algorithm` too). */
const isActionRule = (raw: unknown): raw is Record<string, unknown> =>
  typeof raw === "object" && raw !== null && "action" in raw;

/** The fields only counting rules have (every field of the rule syntax an action rule does not know). */
const COUNTING_FIELDS = Object.keys(ruleSchema.entries).filter(
  (field) => !(field in actionRuleSchema.entries),
);

/** One action rule, checked. */
function actionRule(
  raw: Record<string, unknown>,
  at: string,
  label: string,
  jwtVerifiable: boolean,
  before: number,
): ActionRule {
  const counting = COUNTING_FIELDS.filter((field) => raw[field] !== undefined);
  if (counting.length > 0) {
    throw new ConfigError(
      counting.map((field) =>
        field === "algorithm"
          ? `${at}.action: a rule has an action or an algorithm, not both (an action rule counts nothing)`
          : `${at}.${field}: an action rule counts nothing, so it has no ${field} (only rules with an algorithm do)`,
      ),
    );
  }
  const result = v.safeParse(actionRuleSchema, raw);
  if (!result.success) throw configErrorFrom(at, result.issues);
  const rule = result.output;
  const keyText = rule.key === undefined ? "ip" : Array.isArray(rule.key) ? rule.key.join("|") : rule.key;
  const key = parseKey(rule.key ?? "ip");
  const jwt = key.find((part) => part.kind === "jwt");
  if (jwt && !jwtVerifiable) {
    throw new ConfigError(
      `${at}.key: "jwt:${jwt.claim}" needs ${label === "RATE_LIMIT_RULES" ? "RATE_LIMIT_JWT_SECRET or RATE_LIMIT_JWKS_URL" : "jwt.secret or jwt.jwksUrl"} (unverified claims are forgeable)`,
    );
  }
  return {
    name: rule.name,
    action: rule.action,
    match: rule.match ?? {},
    key,
    keyText,
    mode: rule.mode,
    before,
  };
}

/**
 * Names every object already has (`constructor`, `__proto__`, `toString`, …, and `prototype`): the schema
 * drops some of them without a word, and a lookup by such a name would read the object's own member, so a
 * tier or priority class named so would never apply. Refused, naming the field. A JavaScript object literal's
 * `__proto__: {…}` sets the prototype instead of a key, and is refused the same.
 */
const RESERVED_NAMES: ReadonlySet<string> = new Set([
  ...Object.getOwnPropertyNames(Object.prototype),
  "prototype",
]);

function reservedNames(raw: unknown, at: string): string[] {
  const problems: string[] = [];
  for (const [field, what] of [
    ["tiers", "a tier"],
    ["priorities", "a priority class"],
  ] as const) {
    const names = (raw as Record<string, unknown> | null)?.[field];
    if (!names || typeof names !== "object") continue;
    const prototype = Object.getPrototypeOf(names);
    const found = Object.keys(names).filter((name) => RESERVED_NAMES.has(name));
    if (prototype !== Object.prototype && prototype !== null && !Array.isArray(names))
      found.push("__proto__");
    for (const name of new Set(found)) {
      problems.push(
        `${at}.${field}.${name}: "${name}" cannot name ${what} (every object has a member of that name): choose another`,
      );
    }
  }
  return problems;
}

/** One rule, its schema checked: its fields checked against each other, defaults applied. */
function ruleConfig(
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

/**
 * Fields of valid rules that are never read: a `burst` (the rule's or a tier's) where the algorithm takes none,
 * a `cost` on a rule of one slot per request (`AlgorithmTraits`), a path option with no path,
 * `method_override` with no methods. Not errors, as the rule syntax allows them; check-config warns of each.
 */
export function unreadFields(rules: readonly unknown[], label: string): string[] {
  const unread: string[] = [];
  rules.forEach((raw, index) => {
    const rule = raw as {
      algorithm?: string;
      burst?: unknown;
      cost?: unknown;
      tiers?: Record<string, object>;
      match?: Record<string, unknown>;
    };
    const at = `${label}[${index}]`;
    const match = rule.match ?? {};
    for (const field of ["strict_slash", "case_insensitive"]) {
      if (match[field] !== undefined && match.path === undefined) {
        unread.push(`${at}.match.${field}: ignored, the rule has no path`);
      }
    }
    if (match.method_override !== undefined && match.methods === undefined) {
      unread.push(`${at}.match.method_override: ignored, the rule names no methods`);
    }
    const traits = isAlgorithm(rule.algorithm) ? traitsOf(rule.algorithm) : undefined;
    if (traits && !traits.takesBurst) {
      const tiers = Object.entries(rule.tiers ?? {}).filter(([, limits]) => "burst" in limits);
      for (const where of [...(rule.burst === undefined ? [] : [""]), ...tiers.map(([t]) => `.tiers.${t}`)]) {
        unread.push(`${at}${where}.burst: ignored, only ${namesWith("takesBurst")} rules have a burst`);
      }
    }
    if (traits && !traits.takesCost && rule.cost !== undefined) {
      unread.push(`${at}.cost: ignored, a ${rule.algorithm} rule holds one slot per request`);
    }
  });
  return unread;
}

/**
 * Where a rule lets the client choose what it gets: a `tier` or a shed `priority` read from a header or a query
 * parameter, which any client sets to whatever it likes (the best tier, the class never shed). Valid, as a
 * trusted upstream may set them; check-config warns of each, and the limiter logs each once
 * (docs/security.md: take them from a verified `jwt:` claim).
 */
export function clientChosenSources(rules: readonly RuleConfig[]): string[] {
  const notes: string[] = [];
  for (const rule of rules) {
    const priority = rule.shed?.priority;
    for (const [field, parts, gets] of [
      ["tier", rule.tier ?? [], "its own tier"],
      ["priority", Array.isArray(priority) ? priority : [], "its own priority class, one never shed"],
    ] as const) {
      const chosen = parts.find(
        (part) => part.kind === "header" || part.kind === "query" || part.kind === "cookie",
      );
      if (chosen === undefined || !("name" in chosen)) continue;
      notes.push(
        `rule "${rule.name}" takes its ${field} from "${chosen.kind}:${chosen.name}", which the client sends: any client can pick ${gets}, unless a proxy you trust sets it (take it from a verified jwt:<claim> instead; docs/security.md)`,
      );
    }
  }
  return notes;
}

/**
 * The request headers the rules read (keys, tiers, costs, shed priorities), lower-case: the proxy sends each
 * to the origin as the one value that was counted.
 */
export function headersRead(rules: readonly RuleConfig[]): string[] {
  const names = new Set<string>();
  for (const rule of rules) {
    const priority = rule.shed?.priority;
    const parts = [...rule.key, ...(rule.tier ?? []), ...(Array.isArray(priority) ? priority : [])];
    for (const part of parts) if (part.kind === "header") names.add(part.name);
    if (rule.cost.kind === "header") names.add(rule.cost.name.toLowerCase());
  }
  return [...names];
}

/**
 * Default sub-keys of a `shed` rule: one per 10 requests of capacity, at most 16 (docs/algorithms.md,
 * "Priority load shedding").
 */
const defaultShards = (capacity: number): number => Math.max(1, Math.min(16, Math.floor(capacity / 10)));

/** A `shed` rule's classes, checked; `undefined` for other rules (which may not use the shed fields). */
function shedConfig(rule: v.InferOutput<typeof ruleSchema>, at: string): ShedConfig | undefined {
  if (!traitsOf(rule.algorithm).takesPriorities) {
    const foreign = (["priority", "priorities", "shards"] as const).filter(
      (field) => rule[field] !== undefined,
    );
    if (foreign.length > 0) {
      throw new ConfigError(
        foreign.map((field) => `${at}.${field}: only ${namesWith("takesPriorities")} rules have ${field}`),
      );
    }
    return undefined;
  }
  if (rule.priority === undefined || rule.priorities === undefined) {
    throw new ConfigError([
      ...(rule.priority === undefined
        ? [`${at}.priority: required for shed (e.g. "header:x-priority" or "method")`]
        : []),
      ...(rule.priorities === undefined
        ? [`${at}.priorities: required for shed (e.g. { critical = 1.0, get = 0.8 })`]
        : []),
    ]);
  }
  const shards = rule.shards ?? defaultShards(rule.limit);
  if (shards > rule.limit) {
    throw new ConfigError(
      `${at}.shards: ${shards} sub-keys for a capacity of ${rule.limit} leave some with none`,
    );
  }
  const classes = rule.priorities;
  const fallback = Object.keys(classes).reduce((a, b) => ((classes[b] ?? 1) < (classes[a] ?? 1) ? b : a));
  return {
    priority: rule.priority === "method" ? "method" : parseKey(rule.priority),
    priorityText: Array.isArray(rule.priority) ? rule.priority.join("|") : rule.priority,
    classes: rule.priority === "method" ? upperCaseKeys(classes) : classes,
    fallback: rule.priority === "method" ? fallback.toUpperCase() : fallback,
    shards,
  };
}

const upperCaseKeys = (r: Record<string, number>): Record<string, number> =>
  Object.fromEntries(Object.entries(r).map(([k, share]) => [k.toUpperCase(), share]));

/** `"sse:usage.total_tokens"` → `{ kind: "sse", path: ["usage", "total_tokens"] }` (the schema checked it). */
function settleSource(text: string): SettleSource {
  const colon = text.indexOf(":");
  const kind = text.slice(0, colon);
  const rest = text.slice(colon + 1);
  if (kind === "header") return { kind, name: rest.toLowerCase(), text };
  return { kind: kind === "json" ? "json" : "sse", path: rest.split("."), text };
}

/** `"header:X-Api-Key"` → `{ kind: "header", name: "x-api-key" }`; arrays → composite parts. */
export function parseKey(source: string | readonly string[]): KeyPart[] {
  return (typeof source === "string" ? [source] : source).map(parseKeyPart);
}

function parseKeyPart(source: string): KeyPart {
  if (source === "ip") return { kind: "ip" };
  if (source === "ip/64") return { kind: "ip64" };
  if (source === "global") return { kind: "global" };
  const colon = source.indexOf(":");
  const kind = source.slice(0, colon);
  const name = source.slice(colon + 1);
  if (kind === "header") return { kind, name: name.toLowerCase() };
  if (kind === "query" || kind === "cookie") return { kind, name };
  if (kind === "cf") return { kind, field: name as CfField };
  return { kind: "jwt", claim: name };
}
