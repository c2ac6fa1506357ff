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
export interface HealthReport {
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
