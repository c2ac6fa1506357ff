/**
 * `GET /__floodgate/metrics`: the deployment's counts for Prometheus (docs/monitoring.md). Authorized by the
 * admin token or `RATE_LIMIT_METRICS_TOKEN` (src/admin/auth.ts). A scrape reads, all at once and each bounded
 * by `SCRAPE_WAIT_MS`:
 *   on the first endpoint  one pipeline: HGETALL of the totals, HGETALL of this and the last minute's leased units
 *   on every endpoint      PING, INFO memory, and one pipeline of DBSIZE + SCAN 0 COUNT 1000 (keys per rule)
 * so 3 + 4 = 7 commands with one database, 4 more per further endpoint, whatever the traffic or the number of
 * rules. A read that fails leaves its families out (Redis down: `floodgate_redis_up 0`, the breaker's state).
 */
import type { Hono } from "hono";
import type { CallBudget, RedisPort } from "../engine/redis";
import {
  type EndpointSnapshot,
  type MetricsSnapshot,
  OPENMETRICS_FORMAT,
  renderMetrics,
  TEXT_FORMAT,
  wantsOpenMetrics,
} from "../observability/exposition";
import { LEASED_FRESH_MS, leasedKey, totalsKey } from "../observability/families";
import type { BreakerState } from "../resilience/breaker";
import { authorizeMetrics } from "./auth";
import type { AdminContext, AdminContextResolver, AdminEnv } from "./context";
import { sessionEpochOf } from "./csrf";
import { WrongCredentialsError } from "./problem";
import { AdminThrottle } from "./throttle";

/** The longest a scrape waits for Redis, ms: well inside Prometheus's default 10 s scrape timeout. */
export const SCRAPE_WAIT_MS = 3000;
/** Keys one SCAN looks at to sample keys per rule (Redis does about this much work per scrape, once). */
const SCAN_SAMPLE = 1000;

/**
 * Registers the route on the admin app, before the admin gate (the metrics token passes no other route); wrong
 * tokens count toward the same per-client throttle as the gate's (throttle.ts).
 */
export function metricsRoutes(
  app: Hono<AdminEnv>,
  resolve: AdminContextResolver,
  throttle: AdminThrottle,
): void {
  app.get("/metrics", async (c) => {
    const admin = await resolve(c);
    const client = AdminThrottle.clientOf(c.req.raw, admin.config.clientIpHeader);
    throttle.check(client);
    try {
      await authorizeMetrics(c.req.raw, admin.config.adminToken, admin.config.metricsToken, () =>
        sessionEpochOf(admin),
      );
    } catch (error) {
      if (error instanceof WrongCredentialsError) throttle.failed(client);
      throw error;
    }
    const openMetrics = wantsOpenMetrics(c.req.header("Accept"));
    const body = renderMetrics(await readSnapshot(admin), openMetrics);
    return c.body(body, 200, {
      "Content-Type": openMetrics ? OPENMETRICS_FORMAT : TEXT_FORMAT,
      "Cache-Control": "no-store",
    });
  });
}

/** Everything one scrape reads, in parallel, within `SCRAPE_WAIT_MS`. */
export async function readSnapshot(admin: AdminContext): Promise<MetricsSnapshot> {
  const now = Date.now();
  const budget: CallBudget = { deadline: now + SCRAPE_WAIT_MS };
  const { prefix, rules } = admin.config;
  const minute = Math.floor(now / 60_000);
  const health = admin.endpointHealth();
  const [shared, endpoints] = await Promise.all([
    admin.redis
      .pipeline(
        [
          ["hgetall", totalsKey(prefix)],
          ["hgetall", leasedKey(prefix, minute)],
          ["hgetall", leasedKey(prefix, minute - 1)],
        ],
        budget,
      )
      .catch(() => undefined),
    Promise.all(
      admin.endpoints.map((redis, i) =>
        readEndpoint(redis, prefix, budget, health[i]?.breaker ?? health[0]?.breaker ?? "closed"),
      ),
    ),
  ]);
  return {
    rules: rules.map((rule) => rule.name),
    actions: (admin.config.actions ?? []).filter((a) => a.action === "deny").map((a) => a.name),
    ...(shared && { totals: numbers(shared[0]) }),
    ...(shared && { leasedUnits: leasedUnits([shared[1], shared[2]], now) }),
    endpoints,
  };
}

async function readEndpoint(
  redis: RedisPort,
  prefix: string,
  budget: CallBudget,
  breaker: BreakerState,
): Promise<EndpointSnapshot> {
  const [pong, info, keys] = await Promise.all([
    redis.send(["ping"], budget).catch(() => undefined),
    redis.send(["info", "memory"], budget).catch(() => undefined),
    redis.pipeline([["dbsize"], ["scan", 0, "count", SCAN_SAMPLE]], budget).catch(() => undefined),
  ]);
  const memory = typeof info === "string" ? memoryOf(info) : undefined;
  return {
    up: pong === "PONG",
    breaker,
    ...memory,
    ...(keys && { keysByRule: keysByRule(prefix, keys[0], keys[1]) }),
  };
}

/** `used_memory` and `maxmemory` from `INFO memory`'s text. */
function memoryOf(info: string): Pick<EndpointSnapshot, "usedMemoryBytes" | "maxMemoryBytes"> | undefined {
  const used = /^used_memory:(\d+)/m.exec(info)?.[1];
  if (used === undefined) return undefined;
  const max = /^maxmemory:(\d+)/m.exec(info)?.[1];
  return { usedMemoryBytes: Number(used), maxMemoryBytes: Number(max ?? 0) };
}

/**
 * Keys per rule from one SCAN page: the state keys are `<prefix>:<rule>:{<hash>}…` (src/engine/keys.ts). A
 * page that ended the scan (cursor 0) saw every key: exact. Otherwise the page is a sample of the keyspace in
 * hash-table order, and each rule's share of it is scaled to DBSIZE.
 */
function keysByRule(prefix: string, dbsize: unknown, page: unknown): Map<string, number> | undefined {
  if (!Array.isArray(page) || !Array.isArray(page[1])) return undefined;
  const [cursor, keys] = page as [unknown, unknown[]];
  const counts = new Map<string, number>();
  const head = `${prefix}:`;
  for (const key of keys) {
    if (typeof key !== "string" || !key.startsWith(head)) continue;
    const rule = /^([A-Za-z0-9_-]{1,64}):\{/.exec(key.slice(head.length))?.[1];
    if (rule !== undefined) counts.set(rule, (counts.get(rule) ?? 0) + 1);
  }
  const total = Number(dbsize);
  if (String(cursor) === "0" || keys.length === 0 || !Number.isFinite(total)) return counts;
  for (const [rule, n] of counts) counts.set(rule, Math.round((n * total) / keys.length));
  return counts;
}

/** A flat HGETALL reply as numbers (fields whose value is not one are left out). */
function numbers(reply: unknown): Map<string, number> {
  const out = new Map<string, number>();
  if (!Array.isArray(reply)) return out;
  for (let i = 0; i + 1 < reply.length; i += 2) {
    const value = Number(reply[i + 1]);
    if (Number.isFinite(value)) out.set(String(reply[i]), value);
  }
  return out;
}

/**
 * Lease units outstanding: each isolate's latest flush (`<units>:<ms>`) of the last two minutes, if within
 * `LEASED_FRESH_MS`; `undefined` when no isolate flushed any (leases off, or no traffic).
 */
function leasedUnits(replies: unknown[], now: number): number | undefined {
  const latest = new Map<string, { units: number; at: number }>();
  for (const reply of replies) {
    if (!Array.isArray(reply)) continue;
    for (let i = 0; i + 1 < reply.length; i += 2) {
      const [units, at] = String(reply[i + 1])
        .split(":")
        .map(Number);
      if (units === undefined || at === undefined || !Number.isFinite(units) || !Number.isFinite(at))
        continue;
      const before = latest.get(String(reply[i]));
      if (before === undefined || at > before.at) latest.set(String(reply[i]), { units, at });
    }
  }
  if (latest.size === 0) return undefined;
  let total = 0;
  for (const { units, at } of latest.values()) if (now - at <= LEASED_FRESH_MS) total += units;
  return total;
}
