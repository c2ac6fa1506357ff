/**
 * The composition root of limiting: the rules, parsed once, the one engine that decides them, and the
 * middleware that puts every request through them. The Worker builds it from its bindings (src/worker.ts;
 * its admin API gets the same engine, not the limiter) and its proxy reads the request facts the limiter
 * put on `c.var` (`FloodgateVariables`); `rateLimit()` builds it from its options.
 * Per request: facts → match → live modes (./first-read.ts) → plan → ONE engine call (./decide.ts) → a
 * 429/503 thrown, or on to the handler with headers added, and what the response decides handed off
 * (./hand-off.ts).
 */
import { clientChosenSources } from "../config/warnings";
import { traitsOf } from "../engine/algorithms";
import { RequestFacts } from "../identity";
import { compileRules } from "../rules/match";
import { ProblemError } from "../util/problem";
import { stepsOf } from "./actions";
import type { StatusCounts } from "./count";
import { delayOf, waitForSlot } from "./delay";
import { decideRequest } from "./first-read";
import { handOff, leftBeforeSlot, slotReleaser } from "./hand-off";
import type { Limiter, LimiterDeps, LimiterMiddleware, Prepared } from "./limiter-deps";
import type { PlannedRule } from "./plan";
import { infoOf, report } from "./report";
import { serverTiming, verdictOf } from "./verdict";
import { waitUntilOf } from "./wait-until";

export type { Limiter, LimiterDeps, LimiterMiddleware } from "./limiter-deps";

/** Builds the limiter of `rules`. Nothing here runs per request. */
export function createLimiter(rules: readonly PlannedRule[], deps: LimiterDeps): Limiter {
  const compiled = compileRules(rules.map((p) => p.rule));
  const planned = new Map(rules.map((p) => [p.rule, p]));
  const { decider } = deps;
  // With action rules or live lists, the rules are walked in order (./actions.ts); without, the plain match
  // loop below, as cheap as ever.
  const actions = deps.actions ?? [];
  const prepared: Prepared = {
    deps,
    steps:
      actions.length > 0 || rules.some((p) => p.rule.match.list !== undefined)
        ? stepsOf(rules, actions)
        : undefined,
    // Whether a bucket's call must ask for its stamps: what its give-back proves still owed.
    stamped: new Set(
      rules
        .filter(({ rule }) => (rule.count || rule.settle) && traitsOf(rule.algorithm).shape === "bucket")
        .map(({ rule }) => rule.name),
    ),
    statusCounts: new Map(
      rules.flatMap(({ rule }) => (rule.count ? [[rule.name, rule.count] as const] : [])),
    ) satisfies StatusCounts,
    settleSources: new Map(rules.flatMap((p) => (p.rule.settle ? [[p.rule.name, p.rule.settle]] : []))),
    modeRules: [...rules.map((p) => p.rule), ...actions],
  };
  const { steps } = prepared;

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
    let matched: PlannedRule[] | undefined;
    if (steps === undefined) {
      matched = [];
      for (const r of compiled) {
        if (r.matches(c.req.method, request)) matched.push(planned.get(r.rule) as PlannedRule);
      }
      if (matched.length === 0) return next();
    }
    const pending = decideRequest(prepared, c, request, matched, waitUntil);
    const decided = pending instanceof Promise ? await pending : pending;
    if (decided === undefined) return next(); // no rule applies, or each is off or skipped: no headers
    if (decided instanceof ProblemError) {
      if (deps.answer) return deps.answer(decided);
      throw decided; // a deny rule's 403: nothing counted, no Redis call
    }
    const { decision, requestId } = decided;
    report(deps.onDecision, decision, c.req.raw, request);
    c.set("rateLimit", infoOf(decision));

    const releaseSlots = slotReleaser(decider, decision, requestId);
    const verdict = verdictOf(decision);
    const timing = serverTiming(decision);
    if (!verdict.allowed) {
      if (releaseSlots) waitUntil(releaseSlots().catch(() => undefined));
      verdict.problem.headers["Server-Timing"] = timing;
      if (deps.answer) return deps.answer(verdict.problem);
      throw verdict.problem; // the app's onError (or Hono's default) answers its problem+json
    }
    const admitted = { ...decided, request, releaseSlots, waitUntil };
    const waitMs = delayOf(decision); // a rule with a `delay` reserved a later slot for this request
    if (waitMs > 0 && !(await waitForSlot(waitMs, c.req.raw.signal)))
      return leftBeforeSlot(prepared, c, admitted);

    await next();
    handOff(prepared, c, admitted, verdict.headers, timing);
  };

  return { middleware };
}
