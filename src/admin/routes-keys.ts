/**
 * `/keys/:rule/:identity`: what one client is experiencing under one rule (GET, evaluated by the decision
 * script without writing, so looking never costs the client anything) and a reset of its counters (DELETE;
 * an override stays). A client's tier is not known outside its request: `?tier=<name>` shows the state under
 * that tier's limits (an unknown tier, like the proxy, gets the rule's own).
 */
import type { Hono } from "hono";
import { limitsFor } from "../config/rules";
import { overrideKey, RESET_FENCE_MS, resetFenceKey } from "../engine/keys";
import type { RuleCall } from "../engine/types";
import { recordChange } from "../live/changes";
import { type AdminEnv, findRule } from "./context";
import { rawIdentity, resolveIdentityHash, showHash } from "./identity";
import { getOverride } from "./overrides";
import { formatPeriod } from "./period";

const seconds = (ms: number): number => Math.ceil(ms / 1000);

/** Registers the key routes on the admin app. */
export function keyRoutes(app: Hono<AdminEnv>): void {
  app.get("/keys/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const identityHash = await resolveIdentityHash(rule, rawIdentity(c.req.url, "keys", rule.name));
    // The same resolution as the limiter's plan (one resolver, src/config/rules.ts).
    const limits = limitsFor(rule, c.req.query("tier"));
    const call: RuleCall = {
      rule: rule.name,
      algorithm: rule.algorithm,
      limit: limits.limit,
      periodMs: limits.periodMs,
      burst: limits.burst,
      cost: 1,
      mode: "on",
      failure: rule.failure ?? admin.config.failure,
      identityHash,
    };
    const [decision, override] = await Promise.all([
      admin.peek([call]),
      getOverride(overrideKey(admin.config.prefix, rule.name, identityHash), admin.redisOf(identityHash)),
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
      retry_after: result.outcome === "allowed" ? 0 : Math.max(1, seconds(result.retryAfterMs)),
      override: override
        ? {
            limit: override.limit,
            period: override.periodMs === undefined ? null : formatPeriod(override.periodMs),
            burst: override.burst,
            ttl: override.ttlSeconds,
          }
        : null,
    });
  });

  app.delete("/keys/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const identityHash = await resolveIdentityHash(rule, rawIdentity(c.req.url, "keys", rule.name));
    const keys = admin.stateKeys(rule, identityHash);
    const redis = admin.redisOf(identityHash);
    // The fence first: a lease granted before the reset, returned after it, gives nothing back into the
    // fresh state (lua/floodgate.lua's header, REFUND).
    const fence = resetFenceKey(admin.config.prefix, rule.name, identityHash);
    await redis.set(fence, "1", { px: RESET_FENCE_MS });
    const deleted = keys.length > 0 ? await redis.del(...keys) : 0;
    admin.forget(rule.name, identityHash);
    await recordChange(admin.redis, admin.config.prefix, { rule: rule.name, identityHash });
    return c.json({ rule: rule.name, identity: showHash(identityHash), reset: deleted > 0 });
  });
}
