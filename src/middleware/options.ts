/**
 * The options of `rateLimit(options)`: the same rules as `RATE_LIMIT_RULES`, with keys and
 * costs also as functions of the Hono context, and the engine either as Upstash credentials or as a ready
 * `Decider`.
 */
import type { Context, Env as HonoEnv } from "hono";
import type { CfField, RuleMatch } from "../config";
import type { Algorithm, Decider, Decision, FailurePolicy, Mode, RuleResult, Source } from "../engine/types";
import type { JwtOptions, JwtVerifierFactory } from "../identity/jwt";
import type { RequestFacts } from "../identity/request";
import type { LiveModes } from "../rules/modes";
import type { RunningTimer } from "../util/timer";
import type { SettleEvent } from "./settled";

/** What the limiter reports about one decided request (to `onDecision`). */
export interface DecisionEvent {
  decision: Decision;
  request: Request;
  /** The request's id (also its concurrency slot's id); made on first read, so only when something uses it. */
  readonly requestId: string;
}

/** The decision as a handler (or later middleware) reads it: `c.get("rateLimit")`. */
export interface RateLimitInfo {
  /**
   * `false` when an enforcing (`on`) rule denied the request (in Redis, or from the deny cache or the fallback
   * limiter). The middleware then throws its 429 / 503 before the handler runs, so a handler only ever reads
   * `true` (the app's `onError` may read `false`). A `monitor` rule never makes it `false`, not even under
   * `mode: "monitor"`: one that would have denied shows as a `rules[i].outcome` other than `"allowed"`, with
   * `rules[i].call.mode === "monitor"`.
   */
  allowed: boolean;
  /** Every rule decided for this request, in rule order: limit, remaining, reset, source. */
  rules: RuleResult[];
  /**
   * The strictest rule the headers advertise (the one the `X-RateLimit-*` headers describe); absent when none is
   * (only `shed` rules, or none decided by Redis).
   */
  policy: string | undefined;
  /** Its limit. */
  limit: number | undefined;
  /** Its remaining quota. */
  remaining: number | undefined;
  /**
   * Where its result came from: `redis`, `lease` (docs/leases.md), `async` (an async rule decided in the
   * isolate: docs/going-global.md), or a degraded source (`deny-cache`, `fallback`, `undecided`); without such
   * a rule, where the decision came from.
   */
  source: Source;
}

/**
 * What `rateLimit()` puts on the context, for an app to type its variables with (as hono's `JwtVariables`).
 * @example
 * const app = new Hono<{ Variables: FloodgateVariables }>();
 * app.use(rateLimit({ ... }));
 * app.get("/", (c) => c.json({ remaining: c.var.rateLimit?.remaining, ip: c.var.floodgateRequest.trustedIp() }));
 */
export type FloodgateVariables = {
  /** The rate-limit decision of this request; `undefined` when no rule applied to it. */
  rateLimit: RateLimitInfo | undefined;
  /**
   * The request's facts (URL, canonical path, client IP, request id, verified JWT), read once by the limiter,
   * before anything else it does, and the same values for every later step.
   */
  floodgateRequest: RequestFacts;
  /**
   * The decision budget's timer while it still runs, for a later wait to hang its own on (the Worker's origin
   * timeout: src/util/timer.ts); absent when the request made no Redis call.
   */
  floodgateTimer?: RunningTimer | undefined;
};

declare module "hono" {
  // `c.get("rateLimit")` typed in any app, as the README shows it, not only one typed with FloodgateVariables.
  interface ContextVariableMap {
    rateLimit: FloodgateVariables["rateLimit"];
  }
}

/**
 * `ip` | `ip/64` | `global` | `header:<name>` | `query:<name>` | `jwt:<claim>` | `cf:country` | `cf:asn` |
 * `cf:colo` | `cf:ja4` (Cloudflare's `request.cf`; missing off Cloudflare) | `cookie:<name>`.
 */
export type KeySource =
  | "ip"
  | "ip/64"
  | "global"
  | `header:${string}`
  | `query:${string}`
  | `jwt:${string}`
  | `cf:${CfField}`
  | `cookie:${string}`;

/** Computes an identity (or tier) from the request; `undefined` = no value (the rule's `missing` applies). */
export type KeyFunction<E extends HonoEnv = HonoEnv> = (
  c: Context<E>,
) => string | undefined | Promise<string | undefined>;

/** Computes a request's cost; must return a whole number from 1 to 1e9 (otherwise 400). */
export type CostFunction<E extends HonoEnv = HonoEnv> = (c: Context<E>) => number | Promise<number>;

/** A period: `"30s"`, `"1m"`, `"1h"`, `"1d"`, or whole seconds; 1s..30d. */
export type Period = `${number}${"s" | "m" | "h" | "d"}` | number;

/**
 * A rule that counts nothing (docs/lists.md): `deny` answers 403 naming it, `allow` exempts the request from
 * every rule listed after it. Rules are walked in the order given.
 */
export interface ActionRuleOptions {
  /** `[A-Za-z0-9_-]{1,64}`, unique among all rules. */
  name: string;
  action: "deny" | "allow";
  /** Which requests it acts on (the fields of a counting rule's `match`). @default every request */
  match?: RuleOptions["match"];
  /** Per-rule override of `mode`: `monitor` logs a deny and lets the request on; `off` ignores the rule. */
  mode?: Mode;
}

/** One rule (README: "Rules"). */
export interface RuleOptions<E extends HonoEnv = HonoEnv> {
  /** `[A-Za-z0-9_-]{1,64}`, unique; appears in headers and Redis keys. */
  name: string;
  /** Which requests the rule applies to; absent = every request (docs/matching.md). */
  match?: RuleMatch;
  /** Whose quota a request uses: a source, a composite (array), or a function. */
  key: KeySource | KeySource[] | KeyFunction<E>;
  algorithm: Algorithm;
  /** Requests (or cost units) per period; for `concurrency`, requests in flight. */
  limit: number;
  /**
   * Window; for `concurrency`, the slot lease. Required except for `concurrency`. `fixed-window` also takes a
   * calendar period: a day, week or month of `timezone`'s calendar (docs/counting.md, "Calendar periods").
   * @default "60s" (concurrency)
   */
  period?: Period | "calendar:day" | "calendar:week" | "calendar:month";
  /** A calendar period's IANA time zone, e.g. `"Europe/Paris"`. @default "UTC" */
  timezone?: string;
  /**
   * A calendar period's first day: the day of the month, 1–31 (a shorter month starts on its last day), or the
   * week day, `"monday"` … `"sunday"`. @default 1 (months), "monday" (weeks)
   */
  anchor?: number | "monday" | "tuesday" | "wednesday" | "thursday" | "friday" | "saturday" | "sunday";
  /** Token-bucket capacity / GCRA burst. @default limit */
  burst?: number;
  /**
   * Token-bucket / GCRA only: a request over the rate whose reserved slot comes within this long is held
   * until its slot, then passed on, instead of denied (`"500ms"`, `"5s"`, up to `"60s"`). @default none (deny)
   */
  delay?: `${number}${"ms" | "s" | "m"}` | number;
  /** `shed` rules: where a request's priority class comes from: `"method"` or the same forms as `key`. */
  priority?: "method" | KeySource | KeySource[];
  /**
   * `shed` rules: class → share of capacity (0 < share ≤ 1) above which the class is shed, e.g.
   * `{ critical: 1, post: 0.9, get: 0.8, analytics: 0.7 }`; a request without a known class gets the lowest.
   */
  priorities?: Record<string, number>;
  /** `shed` rules: sub-keys the budget is split over. @default ⌊limit / 10⌋, 1..16 */
  shards?: number;
  /** Units per request: a number, `"header:<name>"` (absent header = 1), or a function. @default 1 */
  cost?: number | `header:${string}` | CostFunction<E>;
  /** Where the client's tier comes from (same forms as `key`). */
  tier?: KeySource | KeySource[] | KeyFunction<E>;
  /** Per-tier limits; an unknown tier gets the rule's own. A tier's `burst` defaults to its `limit`. */
  tiers?: Record<string, { limit?: number; period?: Period; burst?: number }>;
  /** Per-rule override of `mode`. */
  mode?: Mode;
  /** Per-rule override of `failure`. */
  failure?: FailurePolicy;
  /** No value for the key: `"ip"` falls back to the client IP, `"skip"` ignores the rule, `"deny"` answers 401. @default "ip" */
  missing?: "ip" | "skip" | "deny";
  /** `false`: this rule is never decided from a lease (docs/leases.md). @default true */
  lease?: boolean;
  /**
   * `"async"`: decided in the isolate from its last known state, counted in Redis after the response, with a
   * bounded over-admission (docs/going-global.md, "Async rules"); fixed-window, sliding-window, token-bucket
   * and gcra rules without delay, count, settle, block or a calendar period. @default "exact"
   */
  sync?: "exact" | "async";
  /**
   * Charge only requests whose response status is listed: codes (`"401"`) or classes (`"5xx"`); a request holds
   * its units while in flight and gives them back otherwise (docs/counting.md). Not on concurrency or shed
   * rules; such a rule is never decided from a lease. @default every admitted request is charged
   */
  count?: { status: (`${number}` | `${1 | 2 | 3 | 4 | 5}xx` | number)[] };
  /**
   * The request's real cost, read from its response and settled after it (docs/settle.md): a response header,
   * or a number at a dot path of a JSON body or of the last server-sent event carrying it. `cost` is then the
   * reservation charged at admission. Not on `concurrency`, `shed` or `sliding-log`. @default none
   */
  settle?: `header:${string}` | `json:${string}` | `sse:${string}`;
  /**
   * Penalty box: a denial by this rule (mode `on`) keeps the identity denied by it for this long, whatever its
   * rate does (`"15m"`, 1s..30d); in `monitor`, logged as `would_block` only. Not on `concurrency`/`shed`.
   * A blocking rule is never decided from a lease. @default none
   */
  block?: Period;
}

/** Options of `rateLimit`. */
export interface RateLimitOptions<E extends HonoEnv = HonoEnv> {
  /** The rules; every rule that matches a request is decided in one Redis call. */
  rules: (RuleOptions<E> | ActionRuleOptions)[];
  /** Upstash REST credentials (same names as `Redis.fromEnv()`); or give `decider`. */
  redis?: { url: string; token: string };
  /** A ready engine (e.g. `createDecider(createStore(…))`); takes precedence over `redis`. */
  decider?: Decider;
  /** Prefix of every Redis key. @default "rl" */
  prefix?: string;
  /** `on` enforces, `monitor` only counts and sets headers, `off` does nothing. @default "on" */
  mode?: Mode;
  /** What a rule does when Redis cannot answer in time. @default "open" */
  failure?: FailurePolicy;
  /** Budget for one whole Redis decision, ms. @default 200 */
  timeoutMs?: number;
  /**
   * `"off"`: every request decided in Redis; `"on"`: hot identities decided from short leases, never one
   * request too many (docs/leases.md). Applies only to the engine built from `redis`. @default "on"
   */
  leases?: "on" | "off";
  /** The longest life of a lease, ms (1–10000). @default 1000 */
  leaseMs?: number;
  /**
   * `redis` is a Redis Cluster behind the REST endpoint (`RATE_LIMIT_REDIS_CLUSTER`): a request whose rules
   * key on different identities is decided one call per identity (one hash slot each) and undone by a refund
   * when not let through (docs/scaling-out.md). @default false
   */
  cluster?: boolean;
  /**
   * The one header trusted for the client IP: name one only when a proxy you trust sets it (and overwrites a
   * client's). @default "CF-Connecting-IP" on Cloudflare Workers; elsewhere none: `ip` keys read the
   * connection's address (`getConnInfo`), since any client can send any header (docs/security.md)
   */
  clientIpHeader?: string;
  /**
   * Reads the connection's address where no header is trusted: Hono's `getConnInfo` of your runtime
   * (`hono/bun`, `hono/deno`, `@hono/node-server/conninfo`, …). @default @hono/node-server's `env.incoming`,
   * Bun's `requestIP` and Deno's `remoteAddr`, read without it; none found = the `unknown` bucket, logged once
   */
  getConnInfo?: (c: Context<E>) => { remote: { address?: string | undefined } };
  /**
   * How `jwt:<claim>` keys are verified; required by rules that use them. `verifier` checks the tokens with the
   * key material beside it: `joseVerifier` from `hono-floodgate/jwt` (a separate entry, so that an app without
   * `jwt:` keys bundles no `jose`), or your own.
   * @example
   * import { joseVerifier } from "hono-floodgate/jwt";
   * rateLimit({ jwt: { secret: c.env.JWT_SECRET, verifier: joseVerifier }, rules: [{ key: "jwt:sub", … }] })
   */
  jwt?: MiddlewareJwtOptions;
  /** The live mode switches in force (the Worker reads them from the admin API's isolate copy). @default none */
  liveModes?: (c: Context<E>) => LiveModes | Promise<LiveModes>;
  /**
   * Read per-identity overrides (`<prefix>:override:<rule>:{<hash>}`, written by a Floodgate Worker's admin
   * API on the same Redis and prefix, or by hand) in every decision: one more Redis command per rule, and
   * none of the script's one-rule fast paths (docs/algorithms.md, "What a decision costs"). `false`: a rule's limits are
   * its own (the package has no admin API to set an override). A `liveModes` that carries an override index
   * (`LiveModes.overrides`) decides instead. @default false
   */
  overrides?: boolean;
  /**
   * Called once per decided request (analytics, logs); not awaited, so it adds no latency. It may be
   * `async`: a throw or a rejected promise is ignored (never fails the request, never an unhandled
   * rejection), so catch inside it to see its own errors.
   */
  onDecision?: (event: DecisionEvent) => unknown;
  /**
   * Called once a response has decided a request's units under rules that count by status or settle their
   * cost (docs/settle.md, "Seeing it"): each rule's units reserved, moved after the response and left, once
   * Redis has answered; not awaited, and a throw or rejection is ignored, as `onDecision`'s.
   */
  onSettle?: (event: SettleEvent) => unknown;
  /**
   * Called when an `action = "deny"` rule (docs/lists.md) refuses a request, with the rule's name and
   * `"denied"` (its 403), or in `monitor` mode `"would-deny"` (the request goes on): once per request and rule,
   * before the response. Not awaited, and a throw or rejection is ignored, as `onDecision`'s. An `allow`
   * rule's exemption is not reported. @default none
   */
  onAction?: (rule: string, verdict: "denied" | "would-deny") => unknown;
}

/** The middleware's `jwt` option: the key material and the verifier that reads tokens with it. */
export interface MiddlewareJwtOptions extends JwtOptions {
  /**
   * Builds the token verifier once (on the first request) from the fields beside it: `joseVerifier` from
   * `hono-floodgate/jwt`. Required with `secret` or `jwksUrl`.
   */
  verifier?: JwtVerifierFactory;
}
