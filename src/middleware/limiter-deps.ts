/**
 * What a limiter is built from (`LimiterDeps`), what it is (`Limiter`), and what it derives once from its rules
 * (`Prepared`), which every step of a request's limiting reads: the decision (./decide.ts), a fresh isolate's
 * first read (./first-read.ts) and the response's hand-off (./hand-off.ts).
 */
import type { Context, MiddlewareHandler } from "hono";
import type { MiddlewareSettings } from "../config/middleware";
import type { ActionRule, SettleSource } from "../config/rule-config";
import type { Decider, Mode, WaitUntil } from "../engine/types";
import type { JwtVerifier } from "../identity";
import type { LiveModes } from "../rules/modes";
import type { ProblemError } from "../util/problem";
import type { ListLookup, stepsOf } from "./actions";
import type { StatusCounts } from "./count";
import type { DecisionEvent, FloodgateVariables } from "./options";
import type { SettleEvent } from "./settled";

/**
 * What a limiter is built from, besides its rules. The settings are the middleware's, typed by their one
 * schema (src/config/middleware.ts) and documented once in `RateLimitOptions` (src/middleware/options.ts),
 * every one resolved (defaults applied) by the caller: the Worker from its bindings, `rateLimit()` from its
 * options. `timeoutMs` also bounds the live-mode read of a fresh isolate. `clientIpHeader` absent: no header
 * is trusted, the IP is `connectionAddress`'s (the middleware off Cloudflare, src/middleware/conninfo.ts).
 * `overrides` decides only when the live modes carry no override index (the Worker's always do).
 */
export interface LimiterDeps
  extends Pick<MiddlewareSettings, "mode" | "failure" | "timeoutMs" | "clientIpHeader" | "overrides"> {
  /** The engine's whole decision stack (`createEngine(…).decider`, src/resilience/engine.ts). */
  decider: Decider;
  /**
   * Masks an identity into a hint for the dashboard (`RATE_LIMIT_DASHBOARD_HINTS`: the Worker passes
   * `maskIdentity`, src/identity/show.ts); each call then carries its identity's. Absent = no hint.
   */
  identityHint?: ((identity: string) => string) | undefined;
  /** The address of the connection a request came on, read when no header is trusted (`clientIpHeader` absent). */
  connectionAddress?: ((c: Context) => string | undefined) | undefined;
  /** Verifies bearer tokens for `jwt:` keys; absent = such keys are always missing. */
  verifyJwt?: JwtVerifier | undefined;
  /** The live mode switches in force (`waitUntil`: the request's, for a refresh in the background). @default none */
  liveModes?: ((c: Context, waitUntil: WaitUntil) => LiveModes | Promise<LiveModes>) | undefined;
  /**
   * A promise from `liveModes` is a fresh isolate's first read, once per isolate (the Worker's live-mode copy,
   * src/live/cache.ts): the request is decided under the configured modes while it is on its way, and again
   * only if it shows a switch of one of the rules (./first-read.ts). @default false (the promise is awaited first)
   */
  decideWhileModesLoad?: boolean | undefined;
  /**
   * Called once per decided request; not awaited. A throw, or a returned promise that rejects, is ignored:
   * an observer never fails the request, nor (off Workers) the process.
   */
  onDecision?: ((event: DecisionEvent) => unknown) | undefined;
  /**
   * Called when a `deny` rule refuses a request (`denied`, its 403) or would in monitor mode (`would-deny`), with
   * the rule's name: synchronous, never awaited (the Worker counts it in its metrics). @default none
   */
  onAction?: ((rule: string, verdict: "denied" | "would-deny") => void) | undefined;
  /**
   * Called once a response has decided a request's units under rules that count by status or settle their cost
   * (docs/counting.md, docs/settle.md): after the give-back or settlement call, in the background. Ignored
   * like `onDecision`'s throw or rejection.
   */
  onSettle?: ((event: SettleEvent) => unknown) | undefined;
  /**
   * Answers a 429 / 503 with this response instead of throwing it to the app's `onError`: for an app whose
   * `onError` would answer exactly this (the Worker's). A throw costs Hono's error path on every denied
   * request. @default throw (an app's `onError` sees every outcome)
   */
  answer?: ((problem: ProblemError) => Response) | undefined;
  /** The action rules (`deny` / `allow`, docs/lists.md), each with its place among `rules`. @default none */
  actions?: readonly ActionRule[] | undefined;
  /** The isolate's live lists, for rules with `match.list`; absent = such a match holds nobody. */
  lists?: ListLookup | undefined;
  /** The region whose database decides a request (docs/regions.md); absent, or `undefined`: the primary. */
  regionOf?: ((request: Request) => string | undefined) | undefined;
}

/** The limiter's middleware: it puts `FloodgateVariables` on the context of every request it sees. */
export type LimiterMiddleware = MiddlewareHandler<{ Variables: FloodgateVariables }>;

/** One limiter. */
export interface Limiter {
  /** The middleware. */
  readonly middleware: LimiterMiddleware;
}

/** What `createLimiter` (./limiter.ts) derives once from its rules and deps, for every request to read. */
export interface Prepared {
  readonly deps: LimiterDeps;
  /** The rules walked in order, with the action rules (./actions.ts); absent: the plain match loop. */
  readonly steps: ReturnType<typeof stepsOf> | undefined;
  /** The bucket rules that count by status or settle: their calls ask for the stamps a give-back proves owed. */
  readonly stamped: ReadonlySet<string>;
  /** The rules that count by status (docs/counting.md), by name. */
  readonly statusCounts: StatusCounts;
  /** The rules whose cost settles from the response (docs/settle.md), by name. */
  readonly settleSources: ReadonlyMap<string, SettleSource>;
  /** Every rule whose mode a live switch can change, for a fresh isolate's first read (./first-read.ts). */
  readonly modeRules: readonly { name: string; mode?: Mode | undefined }[];
}
