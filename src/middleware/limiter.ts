/**
 * The composition root of limiting: the rules, parsed once, the one engine that decides them, and the
 * middleware that puts every request through them. The Worker builds it from its bindings (src/worker.ts;
 * its admin API gets the same engine, not the limiter) and its proxy reads the request facts the limiter
 * put on `c.var` (`FloodgateVariables`); `rateLimit()` builds it from its options.
 * Per request: facts → match → plan → ONE engine call → a 429/503 thrown, or on to the handler with headers
 * added.
 */
import type { Context, MiddlewareHandler } from "hono";
import type { MiddlewareSettings } from "../config/middleware";
import { type ActionRule, clientChosenSources } from "../config/rules";
import { traitsOf } from "../engine/algorithms";
import type { Decider, Decision, RuleCall, WaitUntil } from "../engine/types";
import { type JwtVerifier, RequestFacts } from "../identity";
import { compileRules } from "../rules/match";
import { type LiveModes, NO_LIVE_MODES } from "../rules/modes";
import { ProblemError } from "../util/problem";
import { within } from "../util/timer";
import { type ListLookup, stepsOf, walkRules } from "./actions";
import { giveBackUncounted, heldUntilStatus, type StatusCounts } from "./count";
import { delayOf, giveBack, waitForSlot } from "./delay";
import { sameModes, undo } from "./first-read";
import { uncheckedDecision } from "./jwks";
import type { DecisionEvent, FloodgateVariables } from "./options";
import { type PlannedRule, planCalls } from "./plan";
import { heldSlots, releaseWhenWritten } from "./release";
import { infoOf, report } from "./report";
import { replaceResponse, withHeaders } from "./respond";
import { settleFrom, settlingOf } from "./settle";
import { type SettleEvent, settleReport } from "./settled";
import { serverTiming, verdictOf } from "./verdict";

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

const NO_REQUEST_ID = "-"; // the script stores the request id only where the algorithm says so; others need no UUID

/** A request's decision, with the id the script saw and when it was made. */
interface Decided {
  decision: Decision;
  requestId: string;
  decidedAtMs: number;
}
/** Whether every rule was decided in the isolate by design (async rules): no Redis round trip to wait beside. */
const madeHere = (decision: Decision): boolean => decision.results.every((r) => r.source === "async");

/** What the rules say of a request: a decision, a deny rule's 403, or nothing (no rule applies). */
type Outcome = Decided | ProblemError | undefined;

/** Builds the limiter of `rules`. Nothing here runs per request. */
export function createLimiter(rules: readonly PlannedRule[], deps: LimiterDeps): Limiter {
  const compiled = compileRules(rules.map((p) => p.rule));
  const planned = new Map(rules.map((p) => [p.rule, p]));
  const { decider, mode, failure, timeoutMs, overrides, lists } = deps;
  const hint = deps.identityHint;
  // The rules that count by status (docs/counting.md) and those whose cost settles from the response
  // (docs/settle.md); whether a bucket's must ask for its stamps: what its give-back proves still owed.
  const statusCounts: StatusCounts = new Map(
    rules.flatMap(({ rule }) => (rule.count ? [[rule.name, rule.count] as const] : [])),
  );
  const settleSources = new Map(rules.flatMap((p) => (p.rule.settle ? [[p.rule.name, p.rule.settle]] : [])));
  const stamped = new Set(
    rules
      .filter(({ rule }) => (rule.count || rule.settle) && traitsOf(rule.algorithm).shape === "bucket")
      .map(({ rule }) => rule.name),
  );
  // With action rules or live lists, the rules are walked in order (./actions.ts); without, the plain match
  // loop below, as cheap as ever.
  const actions = deps.actions ?? [];
  const steps =
    actions.length > 0 || rules.some((p) => p.rule.match.list !== undefined)
      ? stepsOf(rules, actions)
      : undefined;

  // Said once, where the limiter is built (check-config says it before deploy).
  for (const note of clientChosenSources(rules.map((p) => p.rule))) console.warn(`floodgate: ${note}`);

  let warnedUnknownIp = false;
  const identityOptions = {
    clientIpHeader: deps.clientIpHeader,
    verifyJwt: deps.verifyJwt,
    onUnknownIp: () => {
      if (warnedUnknownIp) return;
      warnedUnknownIp = true;
      console.warn(
        deps.clientIpHeader === undefined
          ? `floodgate: a rule keys on the client IP, but this request came with no connection address the middleware can read; such requests share one "unknown" bucket. Pass getConnInfo from your runtime's Hono adapter (hono/bun, hono/deno, @hono/node-server/conninfo), or clientIpHeader when a proxy you trust sets one (docs/security.md).`
          : `floodgate: a request arrived without the ${deps.clientIpHeader} header; its IP identity is "unknown" (one shared bucket). Set RATE_LIMIT_CLIENT_IP_HEADER (Worker) / clientIpHeader (middleware) if your platform uses another header.`,
      );
    },
  };
  const { connectionAddress } = deps;

  // Every rule whose mode a live switch can change, for a fresh isolate's first read (./first-read.ts).
  const modeRules = [...rules.map((p) => p.rule), ...actions];

  /**
   * The request's one decision under `live`: `matched` are its counting rules (absent: walked here, among the
   * action rules). A deny rule's 403, or nothing when no rule applies (each off or skipped). Without a promise
   * when nothing needs one (a hot identity's leases answer at once).
   */
  function decideUnder(
    c: Context,
    request: RequestFacts,
    live: LiveModes,
    matched: PlannedRule[] | undefined,
    budgetMs: number,
    waitUntil: WaitUntil,
  ): Outcome | Promise<Outcome> {
    if (matched !== undefined) return decideMatched(c, request, live, matched, budgetMs, waitUntil);
    lists?.sync(live, waitUntil);
    const walked = walkRules(steps ?? [], c.req.method, request, {
      live,
      mode,
      lists,
      onAction: deps.onAction,
    });
    const go = (outcome: PlannedRule[] | ProblemError) =>
      outcome instanceof ProblemError
        ? outcome
        : decideMatched(c, request, live, outcome, budgetMs, waitUntil);
    return walked instanceof Promise ? walked.then(go) : go(walked);
  }

  function decideMatched(
    c: Context,
    request: RequestFacts,
    live: LiveModes,
    matched: PlannedRule[],
    budgetMs: number,
    waitUntil: WaitUntil,
  ): Outcome | Promise<Outcome> {
    if (matched.length === 0) return undefined;
    // A missing identity under `missing = "deny"` or a bad cost throws its 401 / 400 here.
    const plan = planCalls(c, request, matched, { mode, failure, live, overrides, hint });
    const go = (calls: RuleCall[]) => decideCalls(c, request, calls, budgetMs, waitUntil);
    return plan instanceof Promise ? plan.then(go) : go(plan);
  }

  function decideCalls(
    c: Context,
    request: RequestFacts,
    calls: RuleCall[],
    budgetMs: number,
    waitUntil: WaitUntil,
  ): Outcome | Promise<Outcome> {
    if (calls.length === 0) return undefined; // no headers, no Redis call
    // A bucket's give-back enters the request in its refund ledger: a real id there too.
    const requestId = calls.some((call) => traitsOf(call.algorithm).storesRequestId || stamped.has(call.rule))
      ? request.id()
      : NO_REQUEST_ID;
    // A rule that fails closed and could not be keyed (the JWKS is unreachable) answers 503 without Redis; a
    // hot identity's decision comes from its leases at once: no Redis call, no promise.
    const unchecked = request.jwksUnavailable;
    const decidedAtMs = Date.now();
    const now =
      (unchecked && uncheckedDecision(calls, unchecked.retryAfterMs)) ||
      decider.decideNow?.(calls, requestId, waitUntil);
    if (now) return { decision: now, requestId, decidedAtMs };
    return decider
      .decide(calls, requestId, {
        budgetMs,
        waitUntil,
        region: deps.regionOf?.(c.req.raw),
        onTimer: (timer) => c.set("floodgateTimer", timer),
        ...(stamped.size > 0 && calls.some((call) => stamped.has(call.rule)) && { stamps: true }),
      })
      .then((decision) => ({ decision, requestId, decidedAtMs }));
  }

  const middleware: LimiterMiddleware = async function rateLimit(c, next) {
    // The request's facts, first and once: every later step (this one's planning, the Worker's proxy, a second
    // `rateLimit()` on the same route) reads these.
    const waitUntil = waitUntilOf(c);
    let request: RequestFacts | undefined = c.get("floodgateRequest");
    if (request === undefined) {
      request = new RequestFacts(
        c.req.raw,
        identityOptions,
        waitUntil,
        connectionAddress && (() => connectionAddress(c)),
      );
      c.set("floodgateRequest", request);
    }
    // The live modes. A warm isolate's come without a promise: nothing to wait for. A fresh isolate's first
    // read is a promise: a middleware's own is waited for, and the decision gets what is left of the same
    // budget (no request waits on Redis longer than `timeoutMs` in all); the Worker's (`decideWhileModesLoad`)
    // is not: the request is decided under the configured modes (with no override index, every call reads
    // its override: exact) while the read is on its way, and again only if the read shows a live switch of
    // one of the rules (./first-read.ts). One Redis round trip, not two.
    let budgetMs = timeoutMs;
    let reading: Promise<LiveModes> | undefined;
    let readStartedAt = 0;
    const readLive = (): LiveModes | Promise<LiveModes> => {
      const current = deps.liveModes ? deps.liveModes(c, waitUntil) : NO_LIVE_MODES;
      if (!(current instanceof Promise)) return current;
      readStartedAt = Date.now();
      if (deps.decideWhileModesLoad) {
        reading = current;
        return NO_LIVE_MODES;
      }
      return current.then((read) => {
        budgetMs -= Date.now() - readStartedAt;
        return read;
      });
    };
    let matched: PlannedRule[] | undefined;
    if (steps === undefined) {
      matched = [];
      for (const r of compiled) {
        if (r.matches(c.req.method, request)) matched.push(planned.get(r.rule) as PlannedRule);
      }
      if (matched.length === 0) return next();
    }
    const current = readLive();
    const live = current instanceof Promise ? await current : current;
    const first = decideUnder(c, request, live, matched, budgetMs, waitUntil);
    let decided = first instanceof Promise ? await first : first;
    if (
      reading &&
      decided !== undefined &&
      !(decided instanceof ProblemError) &&
      madeHere(decided.decision)
    ) {
      // Async rules only, decided in the isolate from what it knows: the read lands in the background, and
      // until it is in they run in their configured modes (docs/going-global.md, "Async rules").
      waitUntil(reading.catch(() => undefined));
    } else if (reading) {
      // The read went out before the decision: it is in by now, or waited for within what is left of the
      // budget (a read that fails or is late leaves the configured modes, as a fresh isolate always had).
      const leftMs = () => Math.max(0, timeoutMs - (Date.now() - readStartedAt));
      const read = await within(reading, leftMs()).catch(() => undefined);
      if (read) lists?.sync(read, waitUntil);
      if (read && !sameModes(modeRules, live, read, mode)) {
        if (decided && !(decided instanceof ProblemError)) {
          waitUntil(undo(decider, decided.decision, decided.requestId));
        }
        decided = await decideUnder(c, request, read, matched, leftMs(), waitUntil);
      }
    }
    if (decided === undefined) return next(); // no rule applies, or each is off or skipped: no headers
    if (decided instanceof ProblemError) {
      if (deps.answer) return deps.answer(decided);
      throw decided; // a deny rule's 403: nothing counted, no Redis call
    }
    const { decision, requestId, decidedAtMs } = decided;
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
      if (releaseSlots) waitUntil(releaseSlots().catch(() => undefined));
      verdict.problem.headers["Server-Timing"] = timing;
      if (deps.answer) return deps.answer(verdict.problem);
      throw verdict.problem; // the app's onError (or Hono's default) answers its problem+json
    }
    const waitMs = delayOf(decision); // a rule with a `delay` reserved a later slot for this request
    if (waitMs > 0 && !(await waitForSlot(waitMs, c.req.raw.signal))) {
      // The client went away before its slot: no one to answer, and its slots go back where they can.
      waitUntil(giveBack(decider, decision, requestId).catch(() => undefined));
      if (releaseSlots) waitUntil(releaseSlots().catch(() => undefined));
      // Nothing reached the origin: a rule counting by status gets its units back (a delayed rule's went back
      // with its slot just above).
      const held = heldUntilStatus(decision, statusCounts).filter((r) => !r.delayMs);
      const told = settleReport(deps.onSettle, c.req.raw, () => request.id());
      giveBackUncounted(decider, held, statusCounts, 499, requestId, decidedAtMs, waitUntil, told);
      return new Response(null, { status: 499 });
    }

    await next();
    // The status is known: units held for a status a rule does not count go back (Floodgate's own 502/504
    // included: the proxy's error is the response by now).
    const held = heldUntilStatus(decision, statusCounts);
    const told =
      held.length > 0 || settleSources.size > 0
        ? settleReport(deps.onSettle, c.req.raw, () => request.id())
        : undefined;
    if (held.length > 0) {
      giveBackUncounted(decider, held, statusCounts, c.res.status, requestId, decidedAtMs, waitUntil, told);
    }
    if (c.res.status === 101 || (c.res as { webSocket?: unknown }).webSocket) {
      // A WebSocket's lifetime is not the response's: its slot goes back at once, and its response is
      // passed on untouched (a copy would lose the socket).
      if (releaseSlots) waitUntil(releaseSlots().catch(() => undefined));
      return;
    }
    let response = withHeaders(c.res, verdict.headers, timing);
    // A rule that also counts by status settles only a response it counts (the others' units went back above).
    const settling =
      settleSources.size > 0
        ? settlingOf(decision, settleSources, (rule) => statusCounts.get(rule)?.counts(c.res.status) ?? true)
        : undefined;
    if (settling) {
      // A refund's ledger entry is named by the request (lua/refund.lua): a real id, not the shared "-".
      const settleId = requestId === NO_REQUEST_ID ? request.id() : requestId;
      const context = {
        decider,
        requestId: settleId,
        decidedAtMs,
        waitUntil,
        log: (line: string) => console.warn(line),
        report: told,
      };
      response = settleFrom(response, settling, context, c.error !== undefined);
    }
    if (releaseSlots) {
      // A slot is held while the response body is written. A handler that threw (the proxy's 502/504)
      // or a body-less answer has nothing left to write: the slot goes back at once.
      if (c.error !== undefined) waitUntil(releaseSlots().catch(() => undefined));
      else {
        replaceResponse(c, releaseWhenWritten(response, releaseSlots, waitUntil));
        return;
      }
    }
    if (response !== c.res) replaceResponse(c, response);
  };

  return { middleware };
}

/**
 * `executionCtx.waitUntil` on Workers; elsewhere (Node, Bun) the promise simply runs on. Looked up only
 * when something is handed over (rarely: a lease renewal or return, a refresh): off Workers, Hono's getter
 * throws, and an error made for every request cost a Node app more than the rest of a leased decision.
 */
function waitUntilOf(c: Context): WaitUntil {
  return (promise) => {
    let ctx: { waitUntil(promise: Promise<unknown>): void } | undefined;
    try {
      ctx = c.executionCtx;
    } catch {
      // Not on Workers: Hono's getter throws.
    }
    if (ctx) ctx.waitUntil(promise);
    else void promise.catch(() => undefined);
  };
}
