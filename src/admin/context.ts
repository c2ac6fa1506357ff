/**
 * What the admin API needs from the rest of the Worker, resolved per request by the factory's caller
 * (the config is parsed once per isolate; the store and decider are per isolate too).
 */

import type { Context } from "hono";
import type { FloodgateConfig } from "../config";
import type { RuleConfig } from "../config/rule-config";
import { traitsOf } from "../engine/algorithms";
import { DEFAULTS } from "../engine/defaults";
import { stateKey } from "../engine/keys";
import type { RedisPort } from "../engine/redis";
import { DECIDE } from "../engine/script";
import type { Store } from "../engine/store";
import type { Decision, RuleCall } from "../engine/types";
import type { JwksHealth } from "../identity";
import type { LiveModeCache } from "../live/cache";
import type { LiveLists } from "../live/lists";
import type { MetricsAggregator } from "../observability/metrics";
import type { DeciderHealth, ResilientDecider } from "../resilience/decider";
import { notFound } from "./problem";

/** The admin API's view of the Worker. */
export interface AdminContext {
  /**
   * The configuration; `timeoutMs` (the decision budget) also bounds how long health waits for Redis;
   * `clientIpHeader` names who a wrong token counts against (throttle.ts).
   */
  config: Pick<
    FloodgateConfig,
    "rules" | "prefix" | "adminToken" | "metricsToken" | "mode" | "failure" | "timeoutMs" | "clientIpHeader"
  > &
    Partial<Pick<FloodgateConfig, "actions" | "dashboardHints">>;
  /**
   * The port for admin reads and writes (not bound by the decision budget) on the FIRST endpoint, which holds
   * the keys shared by all identities: live modes, the change log, the override index, dashboard counts.
   */
  redis: RedisPort;
  /** The port of the endpoint holding one identity's keys (its state and overrides). */
  redisOf(identityHash: string): RedisPort;
  /** Every endpoint's port, in `UPSTASH_REDIS_REST_URL`'s order (one entry with one database). */
  endpoints: readonly RedisPort[];
  /** Evaluates `calls` without writing anything (the store's peek), so a look never costs the client quota. */
  peek(calls: RuleCall[]): Promise<Decision>;
  /** Every Redis key holding one identity's counters under one rule (the engine's layout, suffixes included). */
  stateKeys(rule: RuleConfig, identityHash: string): string[];
  /** SHA-1 of the plain decision script (lua/decide.lua), to ask Redis whether it is loaded. */
  scriptSha(): Promise<string>;
  /** Each endpoint's decider health, in `endpoints`' order. */
  endpointHealth(): DeciderHealth[];
  /** The JWKS as this isolate last knew it (the JWT verifier's); absent without `RATE_LIMIT_JWKS_URL`. */
  jwks?: () => JwksHealth;
  /** Drops this isolate's cached denial of an identity after a reset or a new override. */
  forget(rule: string, identityHash: string): void;
  /** This isolate's copy of the live modes, refreshed at once after a switch made here. */
  liveModes?: LiveModeCache;
  /** This isolate's copy of the live lists its rules read, read again at once after a write made here. */
  lists?: LiveLists;
  /** This isolate's dashboard counts (src/observability/metrics.ts): flushed before the dashboard reads. */
  metrics?: Pick<MetricsAggregator, "flush" | "pending">;
  /**
   * The admin timeout per command (the store's `adminTimeoutMs`), ms: also the longest the dashboard
   * waits for Redis in all, its flush and its reads together.
   */
  adminTimeoutMs: number;
}

/**
 * Whether the first endpoint's breaker is open: the last decisions there failed, so a read of what it holds
 * (live modes, counts) answers from this isolate at once, as health does, rather than wait on a Redis that is
 * not answering.
 */
export const firstBreakerOpen = (admin: AdminContext): boolean =>
  admin.endpointHealth()[0]?.breaker === "open";

/** The admin app's Hono environment: the resolved context travels in `c.var.admin`. */
export type AdminEnv = { Variables: { admin: AdminContext } };

/** Resolves the admin context of one request; may throw a `ConfigError`, answered 500 naming the binding. */
export type AdminContextResolver = (c: Context) => AdminContext | Promise<AdminContext>;

/** The rule named in a path, or a 404 naming it. */
export function findRule(context: AdminContext, name: string): RuleConfig {
  const rule = context.config.rules.find((r) => r.name === name);
  if (!rule) throw notFound(`There is no rule named ${JSON.stringify(name)}.`);
  return rule;
}

/** The per-isolate parts the admin context is made of. */
export interface AdminParts {
  config: AdminContext["config"];
  /** The engine's stores, one per endpoint (`createEngine`): their ports and their peek. */
  stores: readonly Pick<Store, "redis" | "decide">[];
  /** The endpoint (index into `stores`) holding an identity. @default every identity on the first */
  shardOf?: (identityHash: string) => number;
  /** The resilient decider (`createEngine`): health and the deny cache. */
  decider: Pick<ResilientDecider, "health" | "forget"> & { endpointHealth?: () => DeciderHealth[] };
  liveModes?: LiveModeCache;
  lists?: LiveLists;
  metrics?: AdminContext["metrics"];
  /** The JWT verifier's JWKS health (`createJwtVerifier(…).jwks`), when a JWKS URL is set. */
  jwks?: AdminContext["jwks"];
  /** The stores' `adminTimeoutMs`, ms. @default 5000 */
  adminTimeoutMs?: number;
}

/** Wires the admin context from the Worker's per-isolate parts. */
export function adminContextOf(parts: AdminParts): AdminContext {
  const {
    config,
    stores,
    shardOf = () => 0,
    decider,
    liveModes,
    lists,
    metrics,
    jwks,
    adminTimeoutMs = DEFAULTS.adminTimeoutMs,
  } = parts;
  const storeOf = (identityHash: string) =>
    stores[shardOf(identityHash)] ?? (stores[0] as AdminParts["stores"][0]);
  return {
    config,
    redis: (stores[0] as AdminParts["stores"][0]).redis,
    redisOf: (identityHash) => storeOf(identityHash).redis,
    endpoints: stores.map((store) => store.redis),
    // A peek never writes, so the id it runs under is never stored. The admin API peeks at one identity.
    // It reads every override, whatever this isolate's override index says: a look is rare and must be right.
    // Not where none applies (a shed sub-key: its limit is its class's share), as in the proxy (src/middleware/plan.ts).
    peek: (calls) =>
      storeOf(calls[0]?.identityHash ?? "").decide(
        calls.map((call) => ({ ...call, override: traitsOf(call.algorithm).readsOverride })),
        "admin-peek",
        { peek: true },
      ),
    // The engine keeps one state key per identity and rule, whatever the algorithm (lua/decide/).
    stateKeys: (rule, identityHash) => [stateKey(config.prefix, rule.name, identityHash)],
    scriptSha: () => DECIDE.sha(),
    endpointHealth: () => decider.endpointHealth?.() ?? [decider.health()],
    forget: (rule, identityHash) => decider.forget(rule, identityHash),
    liveModes,
    lists,
    metrics,
    jwks,
    adminTimeoutMs,
  };
}
