/**
 * `GET /__floodgate/health`: is Redis reachable, is the decision script loaded, what is the breaker doing, and
 * (with a JWKS URL) how this isolate's last JWKS fetch ended, as it knew it: health never fetches the JWKS.
 * Served without a token, so it tells no secrets: no URL, no token, no error text (which could quote a
 * command), only states. The Redis probe (one pipelined PING + SCRIPT EXISTS) is shared by every check
 * that arrives while it is in flight and then cached per isolate for `PROBE_CACHE_MS`, so an
 * unauthenticated caller cannot turn health checks into load on Redis, not even while Redis is slow. The
 * probe itself is bounded by the admin timeout per command (the store's `adminTimeoutMs`, 5 s), but
 * a check waits for it at most `waitMs` (the Worker passes the decision budget, `RATE_LIMIT_TIMEOUT_MS`), and
 * not at all while the endpoint's breaker is open: a probe that has not answered by then counts as Redis
 * unreachable, and goes on in the background, so the checks after it get its answer (docs/operating.md, "Health").
 * A load balancer's health check thus never waits longer than a proxied request would.
 */
import type { RedisPort } from "../engine/redis";
import { StoreError } from "../engine/store";
import type { WaitUntil } from "../engine/types";
import type { JwksHealth } from "../identity";
import { BREAKER_RANK, type BreakerState } from "../resilience/breaker";
import type { DeciderHealth } from "../resilience/decider";
import { within } from "../util/timer";

/** The health body. */
export interface HealthReport extends EndpointHealth {
  /**
   * Only with a JWKS URL: what this isolate last knew of it, never fetched for health (docs/operating.md, "Health");
   * `status` is `degraded` while it is `unavailable`.
   */
  jwks?: JwksHealth;
  /**
   * With several databases (docs/scaling-out.md): each endpoint's own report, in `UPSTASH_REDIS_REST_URL`'s
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
/** A probe unsettled after this long is presumed lost and shared no more, ms (an admin command gives up after 5 s). */
const PROBE_LOST_MS = 10_000;

/** The latest probe of one Redis port: in flight, or settled (`done`). */
interface ProbeEntry {
  probe: Promise<Probe>;
  startedMs: number;
  done?: Probe;
}

// Per Redis port (one per isolate in production; tests may build several).
const probes = new WeakMap<object, ProbeEntry>();

/**
 * The probe in flight, or the last one while it is fresh, or a new one. A new one is handed to `waitUntil`:
 * other requests may be awaiting it, so it must finish even if the request that started it is cancelled.
 */
function sharedProbe(redis: RedisPort, scriptSha: () => Promise<string>, waitUntil?: WaitUntil) {
  const now = Date.now();
  const last = probes.get(redis);
  if (last && (last.done ? now - last.done.atMs < PROBE_CACHE_MS : now - last.startedMs < PROBE_LOST_MS)) {
    return last.probe;
  }
  const entry: ProbeEntry = {
    probe: probe(redis, scriptSha).then((done) => {
      entry.done = done;
      return done;
    }),
    startedMs: now,
  };
  probes.set(redis, entry);
  waitUntil?.(entry.probe);
  return entry.probe;
}

/** How long a health check waits for Redis, and what keeps a shared probe alive. */
export interface HealthOptions {
  /**
   * The request's `waitUntil`: a probe that other requests share must outlive the request that started it,
   * should that one be cancelled.
   */
  waitUntil?: WaitUntil;
  /**
   * The longest wait for the probe, ms; an open breaker waits not at all. A probe not in by then reads as
   * Redis unreachable. @default as long as the probe takes (the admin timeout)
   */
  waitMs?: number;
  /** The isolate's JWKS as it last knew it (src/identity/jwt.ts), when one is configured. */
  jwks?: JwksHealth;
}

/** Builds one endpoint's health report from a (shared or cached) Redis probe and the decider's own view. */
async function healthReport(
  redis: RedisPort,
  scriptSha: () => Promise<string>,
  decider: DeciderHealth,
  options: HealthOptions,
): Promise<HealthReport> {
  const shared = sharedProbe(redis, scriptSha, options.waitUntil);
  // An open breaker already says Redis failed the last decisions: no check waits on it then.
  const waitMs = decider.breaker === "open" ? 0 : options.waitMs;
  // Unanswered in time: unreachable, unless a decision just heard Redis reject the token (it answered, then).
  const answered = waitMs === undefined ? await shared : await within(shared, waitMs);
  const lastProbe = answered ?? unanswered(decider.credentials === "rejected");
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

/**
 * The health of every endpoint: one report as before with one, the worst of each field plus `endpoints` with
 * several; and the JWKS's, if `options.jwks`. The endpoints are probed at once, so the whole report waits at
 * most `options.waitMs`.
 */
export async function healthOfEndpoints(
  endpoints: readonly RedisPort[],
  scriptSha: () => Promise<string>,
  deciders: readonly DeciderHealth[],
  options: HealthOptions = {},
): Promise<HealthReport> {
  const each = await Promise.all(
    endpoints.map((redis, i) =>
      healthReport(redis, scriptSha, deciders[i] ?? (deciders[0] as DeciderHealth), options),
    ),
  );
  const report = each.length === 1 ? (each[0] as HealthReport) : summed(each);
  const { jwks } = options;
  if (!jwks) return report;
  // Meanwhile a token no key fetched before can check is counted by client IP or refused (docs/failure-modes.md,
  // "JWKS").
  return { ...report, status: jwks.status === "unavailable" ? "degraded" : report.status, jwks };
}

/** Several endpoints' reports as one: the worst of each field, and each report under `endpoints`. */
function summed(each: HealthReport[]): HealthReport {
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

async function probe(redis: RedisPort, scriptSha: () => Promise<string>): Promise<Probe> {
  const startedMs = performance.now();
  try {
    const sha = await scriptSha();
    const [, exists] = await redis.pipeline([["ping"], ["script", "exists", sha]]);
    const loaded = Array.isArray(exists) && Number(exists[0]) === 1;
    const latencyMs = Math.round(performance.now() - startedMs);
    return { reachable: true, credentials: "accepted", latencyMs, scriptLoaded: loaded, atMs: Date.now() };
  } catch (error) {
    // Only the kind of failure is kept (as the decider reads it); the message may name a key.
    return unanswered(error instanceof StoreError && error.kind === "auth");
  }
}

/** A probe Redis did not answer (in time), or answered only by rejecting the token. */
function unanswered(rejected: boolean): Probe {
  return {
    reachable: rejected,
    credentials: rejected ? "rejected" : "unknown",
    latencyMs: null,
    scriptLoaded: null,
    atMs: Date.now(),
  };
}
