/**
 * `PUT /mode` (the live switch) and `GET /rules` (the effective rules, and where each value came from).
 * `GET /rules` answers even when Redis cannot be read, as the dashboard does (src/dashboard/data.ts): with the
 * modes this isolate obeys right now, its own copy, and `liveModesFrom: "isolate"` to say so; at once while
 * the breaker is open.
 */
import type { Hono } from "hono";
import type { FloodgateConfig } from "../config";
import type { ActionRule, RuleConfig, ShedConfig } from "../config/rule-config";
import type { Mode } from "../engine/types";
import { explainMode, type ModeSource } from "../live/effective";
import { type LiveModes, readLiveModes, writeLiveMode } from "../live/modes";
import { shedAbove } from "../middleware/shed";
import { withDeadline } from "../util/deadline";
import { type AdminEnv, findRule } from "./context";
import { type LiveModesFrom, liveModesShown } from "./live-copy";
import { formatPeriod } from "./period";
import { ModeBody, parseBody } from "./schemas";

/** Registers `/mode` and `/rules` on the admin app. */
export function liveRoutes(app: Hono<AdminEnv>): void {
  app.put("/mode", async (c) => {
    const admin = c.get("admin");
    const body = await parseBody(c.req.raw, ModeBody);
    // An action rule (docs/lists.md) has a mode too: it is switched like any other.
    if (body.rule !== undefined && !admin.config.actions?.some((a) => a.name === body.rule)) {
      findRule(admin, body.rule);
    }
    // The write and the read back share one wait for Redis, the admin timeout, not one each.
    const live = await withDeadline(admin.adminTimeoutMs, async (deadline) => {
      await deadline.within(() =>
        writeLiveMode(admin.redis, admin.config.prefix, body.rule, body.mode, body.ttl),
      );
      return deadline.within(() => readLiveModes(admin.redis, admin.config.prefix, ruleNames(admin.config)));
    });
    // This isolate obeys its own switch from its next request; every other one within its refresh interval.
    admin.liveModes?.replace(live);
    return c.json(describe(admin.config, live, "redis"));
  });

  app.get("/rules", async (c) => {
    const admin = c.get("admin");
    const waitUntil = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
    const { live, from } = await liveModesShown(admin, waitUntil, "admin_read_failed");
    return c.json(describe(admin.config, live, from));
  });
}

/** Every rule's name, action rules' too: each may have a live mode. */
const ruleNames = (config: Config) => [...config.rules, ...(config.actions ?? [])].map((rule) => rule.name);

type Config = Pick<FloodgateConfig, "rules" | "mode" | "failure"> & Partial<Pick<FloodgateConfig, "actions">>;

/** The effective configuration: every rule as configured (`source: "binding"`), modes with their source. */
function describe(config: Config, live: LiveModes, liveModesFrom: LiveModesFrom) {
  const global = live.global ?? config.mode;
  const source: Extract<ModeSource, "live-global" | "binding"> = live.global ? "live-global" : "binding";
  return {
    mode: {
      effective: global,
      source,
      binding: config.mode,
      live: live.global ?? null,
      // When a live global switch set with a `ttl` lapses (ISO time); absent otherwise.
      ...(live.global && live.globalUntilMs ? { until: new Date(live.globalUntilMs).toISOString() } : {}),
    },
    failure: config.failure,
    rules: config.rules.map((rule) => describeRule(rule, config, live)),
    actions: (config.actions ?? []).map((rule) => describeAction(rule, config, live)),
    liveModesFrom,
  };
}

/** Tiers with their periods in the rule syntax. */
const showTiers = (tiers: RuleConfig["tiers"]) =>
  Object.fromEntries(
    Object.entries(tiers).map(([name, { periodMs, ...rest }]) => [
      name,
      periodMs === undefined ? rest : { ...rest, period: formatPeriod(periodMs) },
    ]),
  );

/**
 * A shed rule's classes as an operator reads them: each class's share and the in-flight count it is shed above
 * (all sub-keys together, as enforced).
 */
function showShed(shed: ShedConfig, capacity: number) {
  return {
    priority: shed.priorityText,
    classes: Object.fromEntries(
      Object.entries(shed.classes)
        .sort(([, a], [, b]) => b - a)
        .map(([name, share]) => [name, { share, shedAbove: shedAbove(capacity, shed.shards, share) }]),
    ),
    unknownClass: shed.fallback,
    shards: shed.shards,
  };
}

/** An action rule (docs/lists.md); `before`: the counting rule it is evaluated ahead of (absent: after all). */
function describeAction(rule: ActionRule, config: Config, live: LiveModes) {
  const mode = explainMode(rule, config.mode, live);
  return {
    name: rule.name,
    action: rule.action,
    match: rule.match,
    key: rule.keyText,
    before: config.rules[rule.before]?.name,
    mode: {
      effective: mode.mode,
      source: mode.source,
      configured: rule.mode ?? null,
      live: (live.rules[rule.name] as Mode | undefined) ?? null,
    },
  };
}

function describeRule(rule: RuleConfig, config: Config, live: LiveModes) {
  const mode = explainMode(rule, config.mode, live);
  return {
    name: rule.name,
    source: "binding",
    match: rule.match,
    key: rule.keyText,
    algorithm: rule.algorithm,
    limit: rule.limit,
    period: formatPeriod(rule.periodMs),
    burst: rule.burst,
    cost: rule.cost.kind === "units" ? rule.cost.units : `header:${rule.cost.name}`,
    tiers: Object.keys(rule.tiers).length > 0 ? showTiers(rule.tiers) : undefined,
    delay: rule.delayMs > 0 ? `${rule.delayMs}ms` : undefined,
    shed: rule.shed && showShed(rule.shed, rule.limit),
    missing: rule.missing,
    failure: rule.failure ?? config.failure,
    mode: {
      effective: mode.mode,
      source: mode.source,
      configured: rule.mode ?? null,
      live: (live.rules[rule.name] as Mode | undefined) ?? null,
    },
  };
}
