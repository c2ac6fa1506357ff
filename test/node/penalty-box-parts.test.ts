// The penalty box's parts at the edge (docs/protect.md, "Penalty box"): the deny cache holds a block to its end
// (not the one second it holds any other denial) and drops every block when admin changes went unheard;
// metrics count a standing block as `blocked`; a monitor rule's log line says what it would have blocked.
// Through the real Workers: test/node/penalty-box-worker.test.ts.
import { describe, expect, it } from "vitest";
import { ruleResult } from "../../src/engine/results";
import type { RuleCall, RuleResult } from "../../src/engine/types";
import { labelsOf } from "../../src/observability/families";
import { decisionLogLine } from "../../src/observability/log";
import { DENY_CACHE_HOLD_MS, DenyCache } from "../../src/resilience/deny-cache";

const BLOCK_MS = 900_000;

const call = (overrides: Partial<RuleCall> = {}): RuleCall => ({
  rule: "login",
  algorithm: "fixed-window",
  limit: 5,
  periodMs: 60_000,
  burst: 5,
  cost: 1,
  mode: "on",
  failure: "open",
  identityHash: "id-1",
  override: false,
  blockMs: BLOCK_MS,
  ...overrides,
});

const denial = (c: RuleCall, blocked: RuleResult["blocked"], retryAfterMs: number): RuleResult =>
  ruleResult({
    call: c,
    outcome: "denied",
    limit: c.limit,
    remaining: 0,
    resetAfterMs: retryAfterMs,
    retryAfterMs,
    source: "redis",
    blocked,
  });

function clock(startMs = 1_000_000) {
  const c = { ms: startMs, now: () => c.ms };
  return c;
}

describe("the deny cache and a block", () => {
  it("answers a blocked identity until its block ends, whatever the cost or limits, then asks Redis", () => {
    const t = clock();
    const cache = new DenyCache(100, t.now);
    cache.remember([denial(call(), "started", BLOCK_MS)]);
    t.ms += 10 * DENY_CACHE_HOLD_MS;
    // A costlier request, or one under another tier's limits: the block answers it all the same.
    const hit = cache.lookup(call({ cost: 3, limit: 50, burst: 50 }));
    expect(hit).toMatchObject({ outcome: "denied", blocked: "standing", source: "deny-cache" });
    expect(hit?.retryAfterMs).toBe(BLOCK_MS - 10 * DENY_CACHE_HOLD_MS);
    t.ms += BLOCK_MS - 10 * DENY_CACHE_HOLD_MS;
    expect(cache.lookup(call())).toBeUndefined();
  });

  it("holds a denial under an override when a block gave it, and any other denial for a second at most", () => {
    const t = clock();
    const cache = new DenyCache(100, t.now);
    cache.remember([{ ...denial(call(), "standing", BLOCK_MS), overridden: true }]);
    cache.remember([denial(call({ rule: "plain", blockMs: undefined }), undefined, 30_000)]);
    t.ms += DENY_CACHE_HOLD_MS;
    expect(cache.lookup(call())).toBeDefined();
    expect(cache.lookup(call({ rule: "plain", blockMs: undefined }))).toBeUndefined();
  });

  it("forgets every block, and only blocks, when admin changes may have gone unheard", () => {
    const t = clock();
    const cache = new DenyCache(100, t.now);
    cache.remember([denial(call(), "standing", BLOCK_MS)]);
    cache.remember([denial(call({ rule: "plain", blockMs: undefined }), undefined, 800)]);
    cache.forgetBlocks();
    expect(cache.lookup(call())).toBeUndefined();
    expect(cache.lookup(call({ rule: "plain", blockMs: undefined }))).toBeDefined();
  });
});

describe("what a block is called", () => {
  it("counts a standing block as `blocked`, the denial that started it as `denied`", () => {
    expect(labelsOf(denial(call(), "standing", 5000))).toEqual({ outcome: "blocked", source: "redis" });
    expect(labelsOf(denial(call(), "started", BLOCK_MS))).toEqual({ outcome: "denied", source: "redis" });
    const cached = new DenyCache(10, () => 0);
    cached.remember([denial(call(), "started", BLOCK_MS)]);
    const again = cached.lookup(call());
    expect(again && labelsOf(again)).toEqual({ outcome: "blocked", source: "deny_cache" });
  });

  it("logs what a monitor rule would have blocked, and the block that denied an enforcing one", () => {
    const watched = denial(call({ mode: "monitor" }), undefined, 20_000);
    const line = JSON.parse(
      decisionLogLine({ allowed: true, results: [watched], durationMs: 1 }, "POST", () => "req-1") ?? "{}",
    );
    expect(line.event).toBe("ratelimit.would_deny");
    expect(line.rules[0]).toMatchObject({ verdict: "would-deny", would_block: true, block_ms: BLOCK_MS });
    const blocked = JSON.parse(
      decisionLogLine(
        { allowed: false, results: [denial(call(), "standing", 5000)], durationMs: 1 },
        "POST",
        () => "req-2",
      ) ?? "{}",
    );
    expect(blocked.rules[0]).toMatchObject({ verdict: "denied", block: "standing", retry_after_ms: 5000 });
    expect(blocked.rules[0].would_block).toBeUndefined();
  });
});
