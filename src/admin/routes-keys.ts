/**
 * `/keys/:rule/:identity`: what one client is experiencing under one rule (GET, evaluated by the decision
 * script without writing, so looking never costs the client anything) and a reset of its counters (DELETE;
 * an override stays). A client's tier is not known outside its request: `?tier=<name>` shows the state under
 * that tier's limits (an unknown tier, like the proxy, gets the rule's own).
 *
 * A `shed` rule's budget for one identity lives in sub-keys `hash(<identity>#<n>)` (src/middleware/shed.ts), each
 * possibly on another endpoint: both routes cover all of them (docs/operating.md, "Why is this client blocked? Reset it.").
 */
import type { Hono } from "hono";
import { MAX_UNITS } from "../config/fields";
import { type EffectiveLimits, limitsFor } from "../config/limits";
import type { RuleConfig, ShedConfig } from "../config/rule-config";
import { traitsOf } from "../engine/algorithms";
import { hashIdentity, overrideKey } from "../engine/keys";
import type { RuleCall } from "../engine/types";
import { canonicalIdentity } from "../identity";
import { HASH_PREFIX } from "../identity/show";
import { retryAfterSeconds } from "../middleware/headers";
import { classSlots, shardIdentity, shedAbove, subKeyCapacity } from "../middleware/shed";
import type { CalendarBounds } from "../util/calendar";
import { withDeadline } from "../util/deadline";
import { recordWithin } from "./change";
import { type AdminContext, type AdminEnv, findRule } from "./context";
import { fenceMsOf, raiseFence, ruleLimits } from "./fence";
import { rawIdentity, resolveIdentityHash, showHash } from "./identity";
import { getOverride } from "./overrides";
import { formatPeriod } from "./period";
import { badRequest } from "./problem";
import { settlementOf } from "./settlement";

const seconds = (ms: number): number => Math.ceil(ms / 1000);

/** Registers the key routes on the admin app. */
export function keyRoutes(app: Hono<AdminEnv>): void {
  app.get("/keys/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const named = rawIdentity(c.req.url, "keys", rule.name);
    // The same resolution as the limiter's plan (one resolver, src/config/limits.ts).
    const limits = limitsFor(rule, c.req.query("tier"));
    if (rule.shed) return c.json(await shedState(admin, { ...rule, shed: rule.shed }, named, limits));
    const identityHash = await resolveIdentityHash(rule, named);
    const call: RuleCall = {
      rule: rule.name,
      algorithm: rule.algorithm,
      limit: limits.limit,
      periodMs: limits.periodMs,
      burst: limits.burst,
      cost: 1,
      mode: "on",
      failure: rule.failure ?? admin.config.failure,
      delayMs: rule.delayMs, // within it, a request past the burst is held, not denied
      identityHash,
      ...(limits.calendar && { calendar: limits.calendar }),
      blockMs: rule.blockMs, // the peek reads the identity's block (and, peeking, never starts one)
    };
    const [decision, override, settlement] = await Promise.all([
      admin.peek([call]),
      getOverride(overrideKey(admin.config.prefix, rule.name, identityHash), admin.redisOf(identityHash)),
      settlementOf(admin, rule, identityHash),
    ]);
    const result = decision.results[0];
    if (!result) throw new Error("the store returned no result for the peeked rule");
    return c.json({
      rule: rule.name,
      identity: showHash(identityHash),
      algorithm: rule.algorithm,
      tier: limits.tier ?? null,
      // What the next request of cost 1 would get; nothing was counted to find out.
      allowed: result.outcome === "allowed",
      limit: result.limit,
      remaining: result.remaining,
      reset_after: seconds(result.resetAfterMs),
      // The same as an instant: a calendar period's end exactly (the bound nearest what Redis's clock says).
      reset_at: resetAt(result.resetAfterMs, limits.calendar),
      // As the proxy's 429 says it (a full concurrency rule: 1 s, not when its oldest lease runs out).
      retry_after: result.outcome === "allowed" ? 0 : retryAfterSeconds([result]),
      // How long the proxy would hold it before sending it on (a rule with a `delay`), whole seconds.
      delay: result.outcome === "allowed" ? seconds(result.delayMs ?? 0) : 0,
      override: override
        ? {
            limit: override.limit,
            period: override.periodMs === undefined ? null : formatPeriod(override.periodMs),
            burst: override.burst,
            ttl: override.ttlSeconds,
          }
        : null,
      // A rule counting by status or settling its cost: what it counts, and the identity's last settlement.
      ...(settlement === undefined ? {} : { settlement }),
      // A rule with a `block`: how long a denial blocks for, and what is left of the identity's block (0: none).
      ...(rule.blockMs === undefined
        ? {}
        : {
            block: {
              for: formatPeriod(rule.blockMs),
              left: result.blocked === undefined ? 0 : seconds(result.retryAfterMs),
            },
          }),
    });
  });

  app.delete("/keys/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const named = rawIdentity(c.req.url, "keys", rule.name);
    if (rule.shed) {
      // Every sub-key on its own endpoint. No fence, change record or forget: a shed slot is never leased
      // nor remembered by a deny cache (src/resilience/deny-cache.ts), so Redis is all there is to reset.
      const budget = await shedBudget({ ...rule, shed: rule.shed }, named);
      const deleted = await Promise.all(
        budget.subKeys.map((hash) => admin.redisOf(hash).send(["del", ...admin.stateKeys(rule, hash)])),
      );
      const reset = deleted.some((n) => Number(n) > 0);
      return c.json({ rule: rule.name, identity: showHash(budget.identityHash), reset });
    }
    const identityHash = await resolveIdentityHash(rule, named);
    const keys = admin.stateKeys(rule, identityHash);
    const redis = admin.redisOf(identityHash);
    // The fence with the delete, in one script call: a lease granted before the reset, returned after it,
    // gives nothing back into the fresh state (src/admin/fence.ts). It stands from the very instant the
    // state goes, sized for every limit the units may have been taken under, and a bucket's until its TAT.
    // Its commands share one wait for Redis, the admin timeout, not one each.
    const target = { prefix: admin.config.prefix, rule: rule.name, identityHash };
    const lift = rule.blockMs !== undefined;
    const deleted = await withDeadline(admin.adminTimeoutMs, async (deadline) => {
      const fenceMs = await fenceMsOf(target, rule.algorithm, ruleLimits(rule), redis, deadline);
      const bucket = traitsOf(rule.algorithm).shape === "bucket";
      // The identity's block (a rule with a `block`) is lifted by the same call: a lift never leaves the state
      // reset and the block standing, whatever fails after it. Before the change is recorded, so that an
      // isolate that forgets its cached block finds none in Redis.
      const fenced =
        keys.length > 0 || lift
          ? await raiseFence(target, fenceMs, redis, deadline, { stateKeys: keys, bucket, lift })
          : { deleted: 0, lifted: false };
      admin.forget(rule.name, identityHash);
      await recordWithin(c, deadline, { rule: rule.name, identityHash });
      return { count: fenced.deleted, lifted: fenced.lifted ? 1 : 0 };
    });
    return c.json({
      rule: rule.name,
      identity: showHash(identityHash),
      reset: deleted.count + deleted.lifted > 0,
      ...(rule.blockMs === undefined ? {} : { block_lifted: deleted.lifted > 0 }),
    });
  });
}

/**
 * When the state is fully reset, as an ISO instant: now plus `resetAfterMs`; for a calendar period, the period
 * bound that lies nearest (Redis's clock picked the period; the edge's may differ by a few ms).
 */
function resetAt(resetAfterMs: number, calendar: CalendarBounds | undefined): string {
  const atMs = Date.now() + resetAfterMs;
  if (calendar === undefined || resetAfterMs <= 0) return new Date(atMs).toISOString();
  const bounds = [calendar.startMs, calendar.endMs, calendar.nextEndMs];
  const nearest = bounds.reduce((a, b) => (Math.abs(b - atMs) < Math.abs(a - atMs) ? b : a));
  return new Date(nearest).toISOString();
}

type ShedRule = RuleConfig & { shed: ShedConfig };

/** One identity's shed budget: the hash of the identity and of each sub-key, in sub-key order. */
interface ShedBudget {
  identityHash: string;
  subKeys: string[];
}

/**
 * The sub-keys of the budget an admin path names, hashed as the proxy hashes `<identity>#<n>`. A hash cannot
 * be traced back to its identity, so `hash:` names a budget only when the rule's identity is fixed (`key =
 * "global"`): then the budget's hash, or any sub-key's (as the dashboard's lists show them), names it.
 */
async function shedBudget(rule: ShedRule, named: string): Promise<ShedBudget> {
  const fixed = rule.key.length === 1 && rule.key[0]?.kind === "global";
  if (named.startsWith(HASH_PREFIX)) {
    const hashed = await resolveIdentityHash(rule, named);
    const budget = fixed ? await shedBudget(rule, "global") : undefined;
    if (budget && (hashed === budget.identityHash || budget.subKeys.includes(hashed))) return budget;
    throw badRequest(
      fixed
        ? `${named} is neither the budget of rule ${JSON.stringify(rule.name)} nor one of its sub-keys.`
        : `A shed rule's budget is split over sub-keys named from the identity itself, which a hash cannot give back: name it by its value (docs/operating.md, "Why is this client blocked? Reset it.").`,
    );
  }
  const identity = canonicalIdentity(rule, named);
  const names = [identity, ...Array.from({ length: rule.shed.shards }, (_, n) => shardIdentity(identity, n))];
  const [identityHash = "", ...subKeys] = await Promise.all(names.map(hashIdentity));
  return { identityHash, subKeys };
}

/**
 * A shed budget as it stands: each sub-key peeked (nothing written) under a limit it cannot reach, so the
 * script reports every slot held there; then, per class, on how many sub-keys the proxy would admit it now
 * (fewer held than the class's slots there, src/middleware/shed.ts).
 */
async function shedState(admin: AdminContext, rule: ShedRule, named: string, limits: EffectiveLimits) {
  const budget = await shedBudget(rule, named);
  const { shards, classes } = rule.shed;
  const capacity = limits.limit;
  const peeked = await Promise.all(
    budget.subKeys.map(async (identityHash, shard) => {
      const decision = await admin.peek([
        {
          rule: rule.name,
          algorithm: rule.algorithm,
          limit: MAX_UNITS,
          periodMs: limits.periodMs,
          burst: MAX_UNITS,
          cost: 1,
          mode: "on",
          failure: rule.failure ?? admin.config.failure,
          identityHash,
        },
      ]);
      const result = decision.results[0];
      if (!result) throw new Error("the store returned no result for the peeked sub-key");
      return {
        identity: showHash(identityHash),
        limit: subKeyCapacity(capacity, shards, shard),
        in_flight: MAX_UNITS - result.remaining,
        resetAfterMs: result.resetAfterMs,
      };
    }),
  );
  const inFlight = peeked.reduce((sum, k) => sum + k.in_flight, 0);
  const view = Object.entries(classes)
    .sort(([, a], [, b]) => b - a)
    .map(([name, share]) => {
      const admittedOn = peeked.filter((k) => k.in_flight < classSlots(k.limit, share)).length;
      return [
        name,
        { share, shed_above: shedAbove(capacity, shards, share), admitted_on: admittedOn },
      ] as const;
    });
  // Nothing shed: even the lowest class gets in on whichever sub-key it picks.
  const allowed = view.every(([, c]) => c.admitted_on === shards);
  return {
    rule: rule.name,
    identity: showHash(budget.identityHash),
    algorithm: rule.algorithm,
    tier: limits.tier ?? null,
    allowed,
    limit: capacity,
    in_flight: inFlight,
    remaining: Math.max(0, capacity - inFlight),
    reset_after: seconds(Math.max(0, ...peeked.map((k) => k.resetAfterMs))),
    // As the proxy's 503 says: a slot frees when a response is done, which no clock can predict.
    retry_after: allowed ? 0 : 1,
    classes: Object.fromEntries(view),
    sub_keys: peeked.map(({ resetAfterMs: _, ...k }) => k),
    // A shed sub-key's limit is its class's share: overrides do not apply (src/middleware/plan.ts).
    override: null,
  };
}
