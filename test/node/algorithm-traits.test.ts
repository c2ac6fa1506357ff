/**
 * Every consumer of the algorithm table (src/engine/algorithms.ts) agrees with it, row by row: the config
 * accepts and warns of exactly the fields a row takes, the script's arguments carry its code and a request id
 * where it stores one, headers and verdicts follow its member and denial, the deny cache, the fallback limiter,
 * refunds and the reply decoder follow its slots, shape and short reply, and leases are asked only where it is
 * leasable (on real Redis). A row whose consumer still decides by name fails here once its traits change.
 */
import type { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_SLOT_LEASE_MS } from "../../src/config/rule-config";
import { parseRules } from "../../src/config/rules";
import { unreadFields } from "../../src/config/warnings";
import {
  ALGORITHM_TRAITS,
  ALGORITHMS,
  type Algorithm,
  namesWith,
  traitsOf,
} from "../../src/engine/algorithms";
import { consumedCalls } from "../../src/engine/groups";
import { decodeReply } from "../../src/engine/reply";
import { refundOf } from "../../src/engine/results";
import { scriptArguments } from "../../src/engine/script";
import type { Store } from "../../src/engine/store";
import type { RuleCall, RuleResult } from "../../src/engine/types";
import { LeasingDecider } from "../../src/leases";
import { LoadShedError, QuotaExceededError } from "../../src/middleware/errors";
import { rateLimitHeaders } from "../../src/middleware/headers";
import { verdictOf } from "../../src/middleware/verdict";
import { EndpointDecider, type ResilientDecider } from "../../src/resilience/decider";
import { DenyCache } from "../../src/resilience/deny-cache";
import { FallbackLimiter } from "../../src/resilience/fallback";
import { directRedis, requestId, ruleCall, testStore, uniquePrefix, withDecide } from "./lua-support";

/** A valid rule of `algorithm`, plus `fields`. */
function rule(algorithm: Algorithm, fields: Record<string, unknown> = {}): Record<string, unknown> {
  const shed = traitsOf(algorithm).takesPriorities
    ? { priority: "method", priorities: { GET: 0.5, POST: 1 } }
    : {};
  return { name: "r", key: "ip", algorithm, limit: 10, period: "1m", ...shed, ...fields };
}

const parse = (raw: Record<string, unknown>) =>
  parseRules([raw], { label: "RATE_LIMIT_RULES", jwtVerifiable: false })[0];

/** What parsing `raw` throws, as text ("" if it parses). */
function parseError(raw: Record<string, unknown>): string {
  try {
    parse(raw);
    return "";
  } catch (error) {
    return String((error as Error).message);
  }
}

/** A Redis result of `call`. */
const result = (
  call: RuleCall,
  outcome: RuleResult["outcome"],
  extra: Partial<RuleResult> = {},
): RuleResult => ({
  call,
  outcome,
  limit: call.limit,
  periodMs: call.periodMs,
  overridden: false,
  remaining: outcome === "allowed" ? 3 : 0,
  resetAfterMs: 30_000,
  retryAfterMs: outcome === "allowed" ? 0 : 5_000,
  source: "redis",
  ...extra,
});

const call = (algorithm: Algorithm, fields: Partial<RuleCall> = {}): RuleCall =>
  ruleCall({ algorithm, limit: 10, burst: 10, periodMs: 60_000, override: false, ...fields });

describe("the table", () => {
  it("numbers its rows 1..n in order, as the script's codes", () => {
    expect(ALGORITHMS.map((a) => ALGORITHM_TRAITS[a].code)).toEqual(ALGORITHMS.map((_, i) => i + 1));
  });

  it.each(ALGORITHMS)("%s: its traits fit together", (algorithm) => {
    const t = traitsOf(algorithm);
    // A bucket's capacity is its burst, and only a bucket reserves a slot ahead (a delay).
    expect(t.takesBurst).toBe(t.shape === "bucket");
    if (t.takesDelay) expect(t.shape).toBe("bucket");
    // A held slot is one per request, named by the request, released (never leased) and has no window.
    expect(t.holdsSlot).toBe(t.shape === "slots");
    if (t.holdsSlot) {
      expect(t).toMatchObject({
        takesCost: false,
        leasable: false,
        storesRequestId: true,
        needsPeriod: false,
      });
      expect(t.rateLimitMember).not.toBe("window");
    }
    if (t.denial === "load") expect(t.rateLimitMember).toBe("none");
  });
});

describe.each(ALGORITHMS)("%s: consumers follow its row", (algorithm) => {
  const t = traitsOf(algorithm);

  it(`config: ${t.takesDelay ? "accepts" : "rejects"} a delay, naming the algorithms that take one`, () => {
    const error = parseError(rule(algorithm, { delay: "1s" }));
    if (t.takesDelay) expect(error).toBe("");
    else expect(error).toContain(`only ${namesWith("takesDelay")} rules can delay a request`);
  });

  it(`config: a period is ${t.needsPeriod ? "required" : "the slot lease, with a default"}`, () => {
    const { period: _, ...raw } = rule(algorithm);
    if (t.needsPeriod) expect(parseError(raw)).toContain(".period: required");
    else expect(parse(raw)?.periodMs).toBe(DEFAULT_SLOT_LEASE_MS);
  });

  it(`config: priority classes are ${t.takesPriorities ? "taken" : "refused"}`, () => {
    const error = parseError({ ...rule(algorithm), priority: "method", priorities: { GET: 1 } });
    if (t.takesPriorities) expect(error).toBe("");
    else expect(error).toContain(`only ${namesWith("takesPriorities")} rules have priority`);
  });

  it(`config: burst and cost ${t.takesBurst ? "read" : "warned of"} and ${t.takesCost ? "read" : "warned of"}`, () => {
    const warnings = unreadFields([rule(algorithm, { burst: 5, cost: 2 })], "RATE_LIMIT_RULES").join("\n");
    expect(warnings.includes(".burst: ignored")).toBe(!t.takesBurst);
    expect(warnings.includes(".cost: ignored")).toBe(!t.takesCost);
  });

  it(`config: settle is ${t.settles ? "accepted, and the rule never leased" : "refused, naming the algorithms that take it"}`, () => {
    const raw = rule(algorithm, { settle: "sse:usage.total_tokens" });
    if (t.settles)
      expect(parse(raw)).toMatchObject({
        lease: false,
        settle: { kind: "sse", path: ["usage", "total_tokens"] },
      });
    else expect(parseError(raw)).toContain(`.settle: only ${namesWith("settles")} rules can settle a cost`);
  });

  it(`config: a rule ${t.leasable ? "may be" : "is never"} leased`, () => {
    expect(parse(rule(algorithm))?.lease).toBe(t.leasable);
  });

  it(`script arguments: its code, and ${t.storesRequestId ? "the" : "no"} request id`, () => {
    const { args } = scriptArguments("p", [call(algorithm)], "the-request");
    expect(args.at(-7)).toBe(String(t.code));
    expect(args.includes("the-request")).toBe(t.storesRequestId);
  });

  it(`headers: ${t.rateLimitMember === "none" ? "no" : `a ${t.rateLimitMember}`} member`, () => {
    if (t.rateLimitMember !== "none") {
      const headers = rateLimitHeaders([result(call(algorithm), "allowed")]);
      const policy = headers["RateLimit-Policy"] ?? "";
      const limit = headers.RateLimit ?? "";
      expect(policy.includes(";w=")).toBe(t.rateLimitMember === "window");
      expect(limit.includes(";t=")).toBe(t.rateLimitMember === "window");
      expect(policy.includes('qu="concurrent-requests"')).toBe(t.rateLimitMember === "concurrent-requests");
    }
    const verdict = verdictOf({
      allowed: true,
      results: [result(call(algorithm), "allowed")],
      durationMs: 0,
    });
    expect(verdict.allowed && "RateLimit" in verdict.headers).toBe(t.rateLimitMember !== "none");
  });

  it(`verdict: a denial is ${t.denial === "quota" ? "the client's quota (429)" : "the origin's load (503)"}`, () => {
    const verdict = verdictOf({
      allowed: false,
      results: [result(call(algorithm), "denied")],
      durationMs: 0,
    });
    expect(verdict.allowed).toBe(false);
    const problem = verdict.allowed ? undefined : verdict.problem;
    expect(problem).toBeInstanceOf(t.denial === "quota" ? QuotaExceededError : LoadShedError);
  });

  it(`deny cache: ${t.holdsSlot ? "never answers" : "answers"} a denial; a larger cost only where the wait is exact`, () => {
    const cache = new DenyCache(100, () => 1_000_000);
    const denied = call(algorithm);
    cache.remember([result(denied, "denied")]);
    expect(cache.lookup(denied) !== undefined).toBe(!t.holdsSlot);
    const larger = cache.lookup({ ...denied, cost: 2 });
    const exact = t.logic.waitForMore(result(denied, "denied"), 1) !== undefined;
    expect(larger !== undefined).toBe(!t.holdsSlot && exact);
  });

  it(`fallback limiter: ${t.holdsSlot ? "a slot held until released" : "units counted for the window"}`, () => {
    const fallback = new FallbackLimiter(100, () => 1_000_000);
    const one = call(algorithm, { limit: 1, burst: 1 });
    fallback.commit(one, "first");
    expect(fallback.judge(one).outcome).toBe("denied");
    fallback.release(one, "first");
    expect(fallback.judge(one).outcome).toBe(t.holdsSlot ? "allowed" : "denied");
  });

  it(`refunds: ${t.holdsSlot ? "a slot is released, not refunded" : "what it consumed goes back"}; stamps only for a bucket`, () => {
    const reservation = { tatUs: 2, previousTatUs: 1, writtenAtUs: 1 };
    const allowed = result(call(algorithm), "allowed", { reservation });
    expect(consumedCalls({ allowed: true, results: [allowed], durationMs: 0 }).length).toBe(
      t.holdsSlot ? 0 : 1,
    );
    expect(refundOf(allowed, 1).pricedAt?.stamp !== undefined).toBe(t.shape === "bucket");
  });

  it(`reply: a bare integer is ${t.integerReply ? "its short reply" : "refused"}`, () => {
    const decode = () => decodeReply(3, [call(algorithm)]);
    if (t.integerReply) expect(decode().results[0]).toMatchObject({ outcome: "allowed", remaining: 3 });
    else expect(decode).toThrow();
  });
});

describe("leases on real Redis", () => {
  let redis: IORedis;
  let store: Store;
  const prefix = uniquePrefix("algorithm-traits");
  beforeAll(() => {
    redis = directRedis();
    store = testStore(prefix);
  });
  afterAll(() => redis.quit());

  it.each(ALGORITHMS)("%s: a hot identity is leased only where the table says so", async (algorithm) => {
    const inner = new EndpointDecider(store, { timeoutMs: 5000 });
    let leaseCalls = 0;
    const counted: ResilientDecider = withDecide(inner, {
      decide(rules, id, opts) {
        if (opts?.lease) leaseCalls++;
        return inner.decide(rules, id, opts);
      },
    });
    const isolate = new LeasingDecider(counted, { refund: store.refund, maxMs: 1000 });
    const hot = ruleCall({ algorithm, limit: 1000, burst: 1000, periodMs: 3_600_000 });
    for (let i = 0; i < 40; i++) {
      const id = requestId();
      const decision = isolate.decideNow([hot], id) ?? (await isolate.decide([hot], id));
      expect(decision.allowed).toBe(true);
      for (const r of decision.results)
        if (traitsOf(r.call.algorithm).holdsSlot) await store.release(hot, id);
    }
    expect(leaseCalls > 0).toBe(traitsOf(algorithm).leasable);
  });
});
