// What `/__floodgate/metrics` calls a rule's result (its `outcome` and `source` labels), how the histogram's
// buckets add up, and the metrics token's validation (docs/monitoring.md). The scrape under a real Prometheus
// is test/node/metrics-prometheus.test.ts.
import { describe, expect, it } from "vitest";
import { ConfigError, parseEnv } from "../../src/config";
import { ruleResult } from "../../src/engine/results";
import type { RuleCall, RuleResult } from "../../src/engine/types";
import type { Env } from "../../src/env";
import { renderMetrics } from "../../src/observability/exposition";
import { labelsOf, latencyField, latencySumField } from "../../src/observability/families";

const call = (overrides: Partial<RuleCall> = {}): RuleCall => ({
  rule: "api",
  algorithm: "token-bucket",
  limit: 10,
  periodMs: 60_000,
  burst: 10,
  cost: 1,
  mode: "on",
  failure: "open",
  identityHash: "AAAAAAAAAAAAAAAAAAAAAA",
  ...overrides,
});

const result = (r: Partial<RuleResult> & { call?: RuleCall }): RuleResult =>
  ruleResult({
    call: call(),
    outcome: "allowed",
    limit: 10,
    remaining: 5,
    resetAfterMs: 0,
    retryAfterMs: 0,
    source: "redis",
    ...r,
  });

describe("a rule's result as floodgate_decisions_total counts it", () => {
  it("names each outcome and source", () => {
    expect(labelsOf(result({}))).toEqual({ outcome: "allowed", source: "redis" });
    expect(labelsOf(result({ delayMs: 300 }))).toEqual({ outcome: "delayed", source: "redis" });
    expect(labelsOf(result({ outcome: "denied", source: "lease" }))).toEqual({
      outcome: "denied",
      source: "lease",
    });
    expect(labelsOf(result({ outcome: "denied", source: "deny-cache" }))).toEqual({
      outcome: "denied",
      source: "deny_cache",
    });
    expect(labelsOf(result({ outcome: "denied", call: call({ mode: "monitor" }) }))).toEqual({
      outcome: "would_deny",
      source: "redis",
    });
    expect(labelsOf(result({ outcome: "denied", call: call({ algorithm: "shed" }) }))).toEqual({
      outcome: "shed",
      source: "redis",
    });
    expect(labelsOf(result({ outcome: "denied", source: "fallback", reason: "timeout" }))).toEqual({
      outcome: "denied",
      source: "fallback",
    });
  });

  it("counts a fail-closed rule Redis could not decide as denied by the fallback, and skips a rule not evaluated", () => {
    const closed = call({ failure: "closed" });
    expect(labelsOf(result({ call: closed, source: "undecided", reason: "timeout" }))).toEqual({
      outcome: "denied",
      source: "fallback",
    });
    expect(labelsOf(result({ source: "undecided", reason: "breaker_open" }))).toEqual({
      outcome: "allowed",
      source: "fallback",
    });
    expect(labelsOf(result({ source: "undecided", reason: "deny_cache" }))).toBeUndefined();
  });
});

describe("the exposition", () => {
  it("renders the histogram's buckets cumulatively, with +Inf, sum in seconds and count", () => {
    const totals = new Map([
      [latencyField("redis", 0), 2],
      [latencyField("redis", 4), 3],
      [latencyField("redis", 12), 1],
      [latencySumField("redis"), 4_500_000],
    ]);
    const text = renderMetrics({ rules: ["api"], totals, endpoints: [] }, false);
    expect(text).toContain('floodgate_decision_duration_seconds_bucket{source="redis",le="0.0005"} 2');
    expect(text).toContain('floodgate_decision_duration_seconds_bucket{source="redis",le="0.005"} 2');
    expect(text).toContain('floodgate_decision_duration_seconds_bucket{source="redis",le="0.01"} 5');
    expect(text).toContain('floodgate_decision_duration_seconds_bucket{source="redis",le="2.5"} 5');
    expect(text).toContain('floodgate_decision_duration_seconds_bucket{source="redis",le="+Inf"} 6');
    expect(text).toContain('floodgate_decision_duration_seconds_sum{source="redis"} 4.5');
    expect(text).toContain('floodgate_decision_duration_seconds_count{source="redis"} 6');
    // Each rule's allowed and denied from Redis are there from the start, at zero.
    expect(text).toContain('floodgate_decisions_total{rule="api",outcome="denied",source="redis"} 0');
  });

  it("names counter families without _total in OpenMetrics, and ends with # EOF", () => {
    const text = renderMetrics({ rules: ["api"], totals: new Map(), endpoints: [] }, true);
    expect(text).toContain("# TYPE floodgate_decisions counter\n");
    expect(text).toContain('floodgate_decisions_total{rule="api",outcome="allowed",source="redis"} 0\n');
    expect(text.endsWith("# EOF\n")).toBe(true);
  });
});

describe("RATE_LIMIT_METRICS_TOKEN", () => {
  const env = (token: string) =>
    ({
      ORIGIN_URL: "https://origin.example.com",
      UPSTASH_REDIS_REST_URL: "https://one.upstash.io",
      UPSTASH_REDIS_REST_TOKEN: "t",
      RATE_LIMIT_RULES: JSON.stringify([
        { name: "api", key: "ip", algorithm: "gcra", limit: 1, period: "1s" },
      ]),
      RATE_LIMIT_METRICS_TOKEN: token,
    }) as Env;

  it("is refused shorter than 16 characters, by name and without showing it", () => {
    const short = "Sh0rt-s3cret-15";
    expect(() => parseEnv(env(short))).toThrow(ConfigError);
    expect(() => parseEnv(env(short))).toThrow(/RATE_LIMIT_METRICS_TOKEN: shorter than 16 characters/);
    expect(() => parseEnv(env(short))).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining(short) }),
    );
    expect(parseEnv(env(`${short}x`)).metricsToken).toBe(`${short}x`);
  });

  it("cannot hold what a Bearer header cannot carry", () => {
    expect(() => parseEnv(env("a token with spaces in it"))).toThrow(
      /RATE_LIMIT_METRICS_TOKEN: cannot be sent/,
    );
  });
});
