/**
 * The composition root of limiting: the rules, parsed once, the one engine that decides them, and the
 * middleware that puts every request through them. The Worker builds it from its bindings
 * (src/worker.ts) and shares it with the admin API and the proxy; `rateLimit()` builds it from its options.
 * Per request: match → plan → ONE engine call → a 429/503 thrown, or on to the handler with headers added.
 */
import type { Context, MiddlewareHandler } from "hono";
import type { RuleConfig } from "../config";
import type { Algorithm, Decider, Decision, FailurePolicy, Mode, RuleResult } from "../engine/types";
import { type JwtVerifier, RequestIdentity } from "../identity";
import { compileRules } from "../rules/match";
import { type LiveModes, NO_LIVE_MODES } from "../rules/modes";
import { strictest } from "./headers";
import type { DecisionEvent, RateLimitInfo } from "./options";
import { type PlannedRule, planCalls } from "./plan";
import { releaseWhenWritten, type WaitUntil } from "./release";
import { serverTiming, verdictOf } from "./verdict";

/** What a limiter is built from, besides its rules. Every field is resolved (defaults applied) by the caller. */
export interface LimiterDeps {
  /** The engine (`createDecider(createStore(…))`). */
  decider: Decider;
  mode: Mode;
  failure: FailurePolicy;
  /** Budget for one whole Redis decision (the live-mode read of a fresh isolate included), ms. */
  timeoutMs: number;
  /** The one header trusted for the client IP. */
  clientIpHeader: string;
  /** Verifies bearer tokens for `jwt:` keys; absent = such keys are always missing. */
  verifyJwt?: JwtVerifier | undefined;
  /** The live mode switches in force. @default none */
  liveModes?: ((c: Context) => LiveModes | Promise<LiveModes>) | undefined;
  /** Called once per decided request. Must not throw; it is not awaited. */
  onDecision?: ((event: DecisionEvent) => void) | undefined;
}

/** One limiter: what the Worker's middleware, admin API and proxy share. */
export interface Limiter {
  /** The rules, as parsed once. */
  readonly rules: readonly RuleConfig[];
  /** The engine deciding them. */
  readonly decider: Decider;
  /** The request facts of `c` (URL, client IP, id): the ones the middleware used, or made now once. */
  requestOf(c: Context): RequestIdentity;
  /** The middleware. */
  readonly middleware: MiddlewareHandler;
}

/** Where the request facts travel on `c.var`. */
const REQUEST_VAR = "floodgateRequest";

/** The script stores the request id only for these (lua/floodgate.lua, ARGV[2]); others need no UUID. */
const USES_REQUEST_ID: ReadonlySet<Algorithm> = new Set(["concurrency", "sliding-log"]);
const NO_REQUEST_ID = "-";

/** Builds the limiter of `rules`. Nothing here runs per request. */
export function createLimiter(rules: readonly PlannedRule[], deps: LimiterDeps): Limiter {
  const compiled = compileRules(rules.map((p) => p.rule));
  const planned = new Map(rules.map((p) => [p.rule, p]));
  const { decider, mode, failure, timeoutMs } = deps;

  let warnedUnknownIp = false;
  const identityOptions = {
    clientIpHeader: deps.clientIpHeader,
    verifyJwt: deps.verifyJwt,
    onUnknownIp: () => {
      if (warnedUnknownIp) return;
      warnedUnknownIp = true;
      console.warn(
        `floodgate: a request arrived without the ${deps.clientIpHeader} header; its IP identity is "unknown" (one shared bucket). Set RATE_LIMIT_CLIENT_IP_HEADER if your platform uses another header.`,
      );
    },
  };

  function requestOf(c: Context): RequestIdentity {
    const vars = c as unknown as Context<{ Variables: { [REQUEST_VAR]?: RequestIdentity } }>;
    let request = vars.get(REQUEST_VAR);
    if (request === undefined) {
      request = new RequestIdentity(c.req.raw, identityOptions);
      vars.set(REQUEST_VAR, request);
    }
    return request;
  }

  const middleware: MiddlewareHandler = async function rateLimit(c, next) {
    const request = requestOf(c);
    const matched: PlannedRule[] = [];
    for (const r of compiled) {
      if (r.matches(c.req.method, request.url)) matched.push(planned.get(r.rule) as PlannedRule);
    }
    if (matched.length === 0) return next();

    // A fresh isolate's first read of the live modes waits on Redis: the decision gets what is left of
    // the same budget, so no request waits on Redis longer than `timeoutMs` in all.
    const liveStartedAt = Date.now();
    const live = deps.liveModes ? await deps.liveModes(c) : NO_LIVE_MODES;
    const budgetMs = timeoutMs - (Date.now() - liveStartedAt);
    // A missing identity under `missing = "deny"` or a bad cost throws its 401 / 400 here.
    const calls = await planCalls(c, request, matched, { mode, failure, live });
    if (calls.length === 0) return next(); // every matched rule is off or skipped: no headers, no Redis call

    const requestId = calls.some((call) => USES_REQUEST_ID.has(call.algorithm))
      ? request.id()
      : NO_REQUEST_ID;
    const decision = await decider.decide(calls, requestId, { budgetMs, waitUntil: waitUntilOf(c) });
    report(deps.onDecision, decision, c.req.raw, request);
    c.set("rateLimit", infoOf(decision));

    const slots = heldSlots(decision);
    const releaseSlots =
      slots.length === 0
        ? undefined
        : () => Promise.all(slots.map((r) => decider.release(r.call, requestId))).then(() => undefined);
    const verdict = verdictOf(decision);
    const timing = serverTiming(decision);
    if (!verdict.allowed) {
      if (releaseSlots) waitUntilOf(c)(releaseSlots().catch(() => undefined));
      verdict.problem.headers["Server-Timing"] = timing;
      throw verdict.problem; // the app's onError (or Hono's default) answers its problem+json
    }

    await next();
    if (c.res.status === 101 || (c.res as { webSocket?: unknown }).webSocket) {
      // A WebSocket's lifetime is not the response's: its slot goes back at once, and its response is
      // passed on untouched (a copy would lose the socket).
      if (releaseSlots) waitUntilOf(c)(releaseSlots().catch(() => undefined));
      return;
    }
    const response = withHeaders(c.res, verdict.headers, timing);
    if (releaseSlots) {
      // A slot is held while the response body is written. A handler that threw (the proxy's 502/504)
      // or a body-less answer has nothing left to write: the slot goes back at once.
      const waitUntil = waitUntilOf(c);
      if (c.error !== undefined) waitUntil(releaseSlots().catch(() => undefined));
      else {
        c.res = releaseWhenWritten(response, releaseSlots, waitUntil);
        return;
      }
    }
    // Hono's `c.res` setter copies the response and every header again: only assign a new object.
    if (response !== c.res) c.res = response;
  };

  return { rules: rules.map((p) => p.rule), decider, requestOf, middleware };
}

/** What `c.get("rateLimit")` shows a handler. */
function infoOf(decision: Decision): RateLimitInfo {
  const decided = decision.results.filter((r) => r.source !== "undecided");
  const top = strictest(decided);
  return {
    allowed: decision.allowed,
    rules: decision.results,
    policy: top?.call.rule,
    limit: top?.limit,
    remaining: top?.remaining,
    source: top?.source ?? "undecided",
  };
}

/** Concurrency slots this request holds (or may hold: a timed-out call may still have been counted). */
function heldSlots(decision: Decision): RuleResult[] {
  return decision.results.filter(
    (r) =>
      r.call.algorithm === "concurrency" &&
      r.outcome === "allowed" &&
      (r.source === "redis" || r.source === "undecided"),
  );
}

function report(
  onDecision: LimiterDeps["onDecision"],
  decision: Decision,
  raw: Request,
  request: RequestIdentity,
): void {
  if (!onDecision) return;
  try {
    onDecision({
      decision,
      request: raw,
      get requestId() {
        return request.id();
      },
    });
  } catch {
    // An observer must never fail the request.
  }
}

/** `executionCtx.waitUntil` on Workers; elsewhere (Node, Bun) the promise simply runs on. */
function waitUntilOf(c: Context): WaitUntil {
  try {
    const ctx = c.executionCtx;
    return (promise) => ctx.waitUntil(promise);
  } catch {
    return (promise) => void promise.catch(() => undefined);
  }
}

/**
 * `response` with the rate-limit headers and `Server-Timing` added: in place when its headers can be
 * changed (the proxy's and most handlers' can), else on a copy (a fetched response's are immutable; the
 * body is not copied). A refused `set` throws before changing anything.
 */
function withHeaders(response: Response, headers: Record<string, string>, timing: string): Response {
  const add = (target: Response): Response => {
    for (const name in headers) target.headers.set(name, headers[name] as string);
    target.headers.append("Server-Timing", timing);
    return target;
  };
  try {
    return add(response);
  } catch (error) {
    if (!(error instanceof TypeError)) throw error;
    return add(new Response(response.body, response));
  }
}
