/**
 * `GET /__floodgate/health`: is Redis reachable, is the decision script loaded, what is the breaker doing.
 * Served without a token, so it tells no secrets: no URL, no token, no error text (which could quote a
 * command), only states. The Redis probe (one pipelined PING + SCRIPT EXISTS) is cached per isolate for
 * `PROBE_CACHE_MS`, so an unauthenticated caller cannot turn health checks into load on Redis. The probe
 * is bounded by the admin client's own per-command timeout (the store's `adminTimeoutMs`).
 */
import type { Redis } from "@upstash/redis";
import type { BreakerState } from "../resilience/breaker";
import type { DeciderHealth } from "../resilience/decider";

/** The health body. */
export interface HealthReport extends EndpointHealth {
  /**
   * With several databases (README "Scaling out"): each endpoint's own report, in `UPSTASH_REDIS_REST_URL`'s
   * order (by position, never by URL); the fields above then sum them up (the worst of each).
   */
  endpoints?: Array<EndpointHealth & { endpoint: number }>;
}

/** One endpoint's health. */
export interface EndpointHealth {
  /** `degraded` when Redis is unreachable, rejects our credentials, or the breaker is not closed. */
  status: "ok" | "degraded";
  redis: { reachable: boolean; credentials: "accepted" | "rejected" | "unknown"; latencyMs: number | null };
  /** Whether Redis has the decision script cached (it is loaded on first use after a restart anyway). */
  script: { loaded: boolean | null };
  breaker: BreakerState;
  /** Ms until the breaker lets a probe through; 0 unless open. */
  breakerRemainingMs: number;
}

interface Probe {
  reachable: boolean;
  credentials: "accepted" | "rejected" | "unknown";
  latencyMs: number | null;
  scriptLoaded: boolean | null;
  atMs: number;
}

/** How long one Redis probe answers health checks of this isolate, ms. */
const PROBE_CACHE_MS = 1000;

// Per Redis client (one per isolate in production; tests may build several).
const lastProbes = new WeakMap<object, Probe>();

/** Builds the health report from a (cached) Redis probe and the decider's own view. */
export async function healthReport(
  redis: Redis,
  scriptSha: () => Promise<string>,
  decider: DeciderHealth,
): Promise<HealthReport> {
  let lastProbe = lastProbes.get(redis);
  if (!lastProbe || Date.now() - lastProbe.atMs >= PROBE_CACHE_MS) {
    lastProbe = await probe(redis, scriptSha);
    lastProbes.set(redis, lastProbe);
  }
  const credentials =
    lastProbe.credentials === "rejected" || decider.credentials === "rejected"
      ? "rejected"
      : lastProbe.credentials;
  const ok = lastProbe.reachable && credentials !== "rejected" && decider.breaker === "closed";
  return {
    status: ok ? "ok" : "degraded",
    redis: { reachable: lastProbe.reachable, credentials, latencyMs: lastProbe.latencyMs },
    script: { loaded: lastProbe.scriptLoaded },
    breaker: decider.breaker,
    breakerRemainingMs: decider.breakerRemainingMs,
  };
}

/** The health of every endpoint: one report as before with one, the worst of each field plus `endpoints` with several. */
export async function healthOfEndpoints(
  endpoints: readonly Redis[],
  scriptSha: () => Promise<string>,
  deciders: readonly DeciderHealth[],
): Promise<HealthReport> {
  const each = await Promise.all(
    endpoints.map((redis, i) =>
      healthReport(redis, scriptSha, deciders[i] ?? (deciders[0] as DeciderHealth)),
    ),
  );
  const first = each[0] as HealthReport;
  if (each.length === 1) return first;
  const worst = each.reduce((a, b) => (BREAKER_RANK[b.breaker] > BREAKER_RANK[a.breaker] ? b : a));
  const latencies = each.map((r) => r.redis.latencyMs);
  return {
    status: each.every((r) => r.status === "ok") ? "ok" : "degraded",
    redis: {
      reachable: each.every((r) => r.redis.reachable),
      credentials: each.some((r) => r.redis.credentials === "rejected")
        ? "rejected"
        : each.every((r) => r.redis.credentials === "accepted")
          ? "accepted"
          : "unknown",
      latencyMs: latencies.includes(null) ? null : Math.max(...(latencies as number[])),
    },
    script: { loaded: each.every((r) => r.script.loaded === true) },
    breaker: worst.breaker,
    breakerRemainingMs: Math.max(...each.map((r) => r.breakerRemainingMs)),
    endpoints: each.map((r, endpoint) => ({ endpoint, ...r })),
  };
}

const BREAKER_RANK: Readonly<Record<BreakerState, number>> = { closed: 0, "half-open": 1, open: 2 };

async function probe(redis: Redis, scriptSha: () => Promise<string>): Promise<Probe> {
  const startedMs = performance.now();
  try {
    const sha = await scriptSha();
    const [, exists] = (await redis.pipeline().ping().scriptExists(sha).exec()) as [unknown, unknown];
    const loaded = Array.isArray(exists) ? Number(exists[0]) === 1 : Number(exists) === 1;
    const latencyMs = Math.round(performance.now() - startedMs);
    return { reachable: true, credentials: "accepted", latencyMs, scriptLoaded: loaded, atMs: Date.now() };
  } catch (error) {
    // Only the kind of failure is kept; the message may quote the command or the endpoint.
    const rejected = /WRONGPASS|unauthori[sz]ed|invalid token|NOAUTH/i.test(
      String((error as Error)?.message),
    );
    return {
      reachable: rejected,
      credentials: rejected ? "rejected" : "unknown",
      latencyMs: null,
      scriptLoaded: null,
      atMs: Date.now(),
    };
  }
}
