/**
 * What a rule is once validated: `RuleConfig` (a counting rule, every default applied), `ActionRule` (a `deny`
 * or `allow` rule, docs/lists.md) and the parts they are made of. Every later stage reads these; they are
 * built by src/config/rules.ts.
 */
import type { Algorithm, FailurePolicy, Mode } from "../engine/types";
import type { CalendarPeriod } from "../util/calendar";
import type { StatusCount } from "./count";
import type { CfField } from "./source-fields";

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

/** The `match` fields on what is known of the request (docs/lists.md); each lists values, any of which matches. */
export interface FactMatch {
  /** Client addresses or CIDRs (IPv4, IPv6; an IPv4-mapped client matches its IPv4 form). */
  ip?: string[];
  /** `request.cf.country` codes (`"DE"`), upper case; on Cloudflare only. */
  country?: string[];
  /** `request.cf.asn` numbers; on Cloudflare only. */
  asn?: number[];
  /** Case-insensitive globs of the `User-Agent` header, `*` any characters (`"*curl*"`). */
  user_agent?: string[];
}

/** Which requests a rule applies to (docs/matching.md); an absent field matches every request. */
export interface RuleMatch extends FactMatch {
  /** The request's method, or one it tunnels (`X-HTTP-Method-Override`, `_method`, …); GET covers HEAD. @default every method */
  methods?: string[];
  /** `*` spans `/`; `:name` is one segment; matched canonical and as sent. @default every path */
  path?: string;
  /** `api.example.com` or `*.example.com`, optionally with `:port`. @default every host */
  host?: string;
  /** `true`: `/login/` is another path than `/login`. @default false */
  strict_slash?: boolean;
  /** `true`: the path's ASCII letters match in either case. @default false */
  case_insensitive?: boolean;
  /** `false`: a request counts under its own method only, never one it tunnels (src/rules/method.ts). @default true */
  method_override?: boolean;
}

/** A validated rule with every default applied. */
export interface RuleConfig {
  name: string;
  /** As written: which requests the rule applies to, and how they are read (docs/matching.md). */
  match: RuleMatch & {
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
