/**
 * `rateLimit(options)`: the Hono middleware, and the Worker's whole limiting pipeline (the Worker is this
 * middleware in front of the proxy). Per request: match rules → resolve identities → ONE engine call →
 * 429 / 503, or on to the handler with the rate-limit headers added to its response.
 */
import type { Context, Env as HonoEnv, MiddlewareHandler } from "hono";
import { ConfigError, parseRules } from "../config";
import { createStore } from "../engine/store";
import type { Decider, Decision, RuleResult } from "../engine/types";
import { ProblemError, problemResponse } from "../http/problems";
import { releaseWhenWritten, type WaitUntil } from "../http/release";
import { createJwtVerifier, type IdentityOptions, RequestIdentity } from "../identity";
import { createDecider } from "../resilience/decider";
import { compileRules } from "../rules/match";
import { NO_LIVE_MODES } from "../rules/modes";
import type { RateLimitOptions } from "./options";
import { type PlannedRule, planCalls } from "./plan";
import { serverTiming, verdictOf } from "./verdict";

export type * from "./options";

/**
 * Rate-limits the requests of a Hono app with Floodgate's engine (one atomic Redis call per request).
 * Validates the options once (throws a `ConfigError` naming the field) and returns the middleware.
 *
 * @example
 * app.use("/api/*", rateLimit({
 *   redis: { url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN },
 *   rules: [{ name: "per-key", key: (c) => c.req.header("x-api-key"), algorithm: "token-bucket", limit: 100, period: "1m" }],
 * }));
 */
export function rateLimit<E extends HonoEnv = HonoEnv>(options: RateLimitOptions<E>): MiddlewareHandler<E> {
  const planned = validateRules(options);
  const compiled = compileRules(planned.map((p) => p.rule));
  const byRule = new Map(planned.map((p) => [p.rule, p]));
  const mode = options.mode ?? "on";
  const failure = options.failure ?? "open";
  const timeoutMs = options.timeoutMs ?? 200;
  const getDecider = lazyDecider(options);

  let warnedUnknownIp = false;
  const identityOptions: IdentityOptions = {
    clientIpHeader: options.clientIpHeader ?? "CF-Connecting-IP",
    verifyJwt: options.jwt?.secret || options.jwt?.jwksUrl ? createJwtVerifier(options.jwt) : undefined,
    onUnknownIp: () => {
      if (warnedUnknownIp) return;
      warnedUnknownIp = true;
      console.warn(
        `floodgate: a request arrived without the ${identityOptions.clientIpHeader} header; its IP identity is "unknown" (one shared bucket). Set RATE_LIMIT_CLIENT_IP_HEADER if your platform uses another header.`,
      );
    },
  };

  return async function rateLimit(c, next) {
    const url = new URL(c.req.url);
    const matched = compiled
      .filter((r) => r.matches(c.req.method, url))
      .map((r) => byRule.get(r.rule) as PlannedRule);
    if (matched.length === 0) return next();

    // A fresh isolate's first read of the live modes waits on Redis: the decision gets what is left of
    // the same budget, so no request waits on Redis longer than `timeoutMs` in all.
    const liveStartedAt = Date.now();
    const live = options.liveModes ? await options.liveModes(c) : NO_LIVE_MODES;
    const budgetMs = timeoutMs - (Date.now() - liveStartedAt);
    const request = new RequestIdentity(c.req.raw, identityOptions, url);
    let calls: Awaited<ReturnType<typeof planCalls>>;
    try {
      calls = await planCalls(c as unknown as Context, request, matched, { mode, failure, live });
    } catch (error) {
      if (error instanceof ProblemError) return problemResponse(error);
      throw error;
    }
    if (calls.length === 0) return next(); // every matched rule is off or skipped: no headers, no Redis call

    const decider = getDecider();
    // Per request, never at module scope: Workers forbid randomness in global scope.
    const requestId = crypto.randomUUID();
    const decision = await decider.decide(calls, requestId, { budgetMs });
    report(options, decision, c.req.raw, requestId);

    const waitUntil = waitUntilOf(c);
    const slots = heldSlots(decision);
    const releaseSlots = () =>
      Promise.all(slots.map((r) => decider.release(r.call, requestId))).then(() => undefined);
    const verdict = verdictOf(decision);
    if (!verdict.allowed) {
      if (slots.length > 0) waitUntil(releaseSlots().catch(() => undefined));
      const response = problemResponse(verdict.problem);
      response.headers.set("Server-Timing", serverTiming(decision));
      return response;
    }

    await next();
    if (c.res.status === 101 || (c.res as { webSocket?: unknown }).webSocket) {
      if (slots.length > 0) waitUntil(releaseSlots().catch(() => undefined));
      return;
    }
    const timing = serverTiming(decision);
    const response = withHeaders(c.res, verdict.headers, timing);
    const settled =
      slots.length === 0 || response.status === 502 || response.status === 504 || response.body === null;
    if (slots.length > 0 && settled) waitUntil(releaseSlots().catch(() => undefined));
    if (!settled) c.res = releaseWhenWritten(response, releaseSlots, waitUntil);
    // Hono's `c.res` setter copies the response and every header again: only assign a new object.
    else if (response !== c.res) c.res = response;
  };
}

/** Validates the rules once; key/cost/tier functions are set aside and the rest checked like RATE_LIMIT_RULES. */
function validateRules<E extends HonoEnv>(options: RateLimitOptions<E>): PlannedRule[] {
  if (!options || !Array.isArray(options.rules)) throw new ConfigError("rules: expected an array of rules");
  const fns = options.rules.map((rule) => ({
    keyFn: typeof rule.key === "function" ? rule.key : undefined,
    tierFn: typeof rule.tier === "function" ? rule.tier : undefined,
    costFn: typeof rule.cost === "function" ? rule.cost : undefined,
  }));
  const plain = options.rules.map((rule, i) => ({
    ...rule,
    key: fns[i]?.keyFn ? "global" : rule.key,
    tier: fns[i]?.tierFn ? "global" : rule.tier,
    cost: fns[i]?.costFn ? 1 : rule.cost,
  }));
  const jwtVerifiable = Boolean(options.jwt?.secret || options.jwt?.jwksUrl);
  const rules = parseRules(plain, { label: "rules", jwtVerifiable });
  return rules.map((rule, i) => ({ rule, ...(fns[i] as object) }) as PlannedRule);
}

/** The engine, built on first use (no I/O, timers or randomness may happen at a Worker's module scope). */
function lazyDecider<E extends HonoEnv>(options: RateLimitOptions<E>): () => Decider {
  if (options.decider) {
    const decider = options.decider;
    return () => decider;
  }
  if (!options.redis?.url || !options.redis?.token) {
    throw new ConfigError(
      "redis: give { url, token } (UPSTASH_REDIS_REST_URL / _TOKEN) or a ready `decider`",
    );
  }
  const redis = options.redis;
  let decider: Decider | undefined;
  return () => {
    decider ??= createDecider(
      createStore({ ...redis, prefix: options.prefix ?? "rl", timeoutMs: options.timeoutMs ?? 200 }),
      {
        timeoutMs: options.timeoutMs ?? 200,
      },
    );
    return decider;
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

function report<E extends HonoEnv>(
  options: RateLimitOptions<E>,
  decision: Decision,
  request: Request,
  requestId: string,
) {
  try {
    options.onDecision?.({ decision, request, requestId });
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
