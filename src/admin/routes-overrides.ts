/**
 * `/overrides/:rule/:identity` (PUT, GET, DELETE) and `/overrides/:rule` (list). An override replaces the
 * rule's `limit`, `period` and `burst` for one identity; the decision script reads it in the same call.
 * It applies from the very next request of this isolate (its override index is updated here) and in every
 * other isolate within about one second (the change log, src/live/changes.ts). Lease returns of units taken
 * under the limits it replaces (and, for a set, under those it sets) are fenced off before each set or
 * removal (fence.ts), and the identity's state is carried into the limits in force after it, as units
 * (reaim.ts). A set or a removal is several Redis commands in a row: they share one wait, the admin timeout
 * (src/util/deadline.ts), not one each.
 */
import type { Hono } from "hono";
import { leastCost, windowCapProblem } from "../config/window-cap";
import { traitsOf } from "../engine/algorithms";
import { overrideKey } from "../engine/keys";
import { withDeadline } from "../util/deadline";
import { recordWithin } from "./change";
import { type AdminEnv, findRule } from "./context";
import { fenceReturns, ruleLimits } from "./fence";
import { rawIdentity, resolveIdentityHash, showHash } from "./identity";
import {
  deleteOverride,
  getOverride,
  isCursor,
  listOverridesOf,
  putOverride,
  type StoredOverride,
} from "./overrides";
import { formatPeriod } from "./period";
import { badRequest, notFound } from "./problem";
import { reaimState } from "./reaim";
import { OverrideBody, parseBody } from "./schemas";

const DEFAULT_PAGE_SIZE = 100;
const MAX_PAGE_SIZE = 1000;

/** 400 for a `cursor` no page handed out. */
const badCursor = () => badRequest("cursor: pass back the `next_cursor` of the previous page.");

/** An override as the API shows it: `period` in the rule syntax (`null` = the rule's own), `ttl` in seconds. */
const show = (identityHash: string, stored: StoredOverride) => ({
  identity: showHash(identityHash),
  limit: stored.limit,
  period: stored.periodMs === undefined ? null : formatPeriod(stored.periodMs),
  burst: stored.burst,
  ttl: stored.ttlSeconds,
});

/** Registers the override routes on the admin app. */
export function overrideRoutes(app: Hono<AdminEnv>): void {
  app.get("/overrides/:rule", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const cursor = c.req.query("cursor") ?? "0";
    if (!isCursor(cursor, admin.endpoints.length)) throw badCursor();
    const pageSize = Number(c.req.query("limit") ?? DEFAULT_PAGE_SIZE);
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > MAX_PAGE_SIZE) {
      throw badRequest(`limit: must be a whole number from 1 to ${MAX_PAGE_SIZE}.`);
    }
    const listing = listOverridesOf(admin.endpoints, admin.config.prefix, rule.name, cursor, pageSize);
    const page = await listing.catch((error: unknown) => {
      // A number no SCAN handed out (past 64 bits): Redis refuses it, and the fault is the request's.
      if (/invalid cursor/i.test(String((error as Error)?.message))) throw badCursor();
      throw error;
    });
    return c.json({
      rule: rule.name,
      overrides: page.items.map((item) => show(item.identityHash, item)),
      next_cursor: page.nextCursor,
    });
  });

  app.put("/overrides/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    if (rule.shed) {
      // Its sub-keys' limits are the classes' shares of `limit` (src/middleware/shed.ts): an override would be
      // stored and never read.
      throw badRequest(`Rule ${JSON.stringify(rule.name)} sheds load; overrides do not apply to it.`);
    }
    const identityHash = await resolveIdentityHash(rule, rawIdentity(c.req.url, "overrides", rule.name));
    const body = await parseBody(c.req.raw, OverrideBody);
    const override = { limit: body.limit, periodMs: body.period, burst: body.burst ?? body.limit };
    const cap = traitsOf(rule.algorithm).maxRequestsPerWindow;
    const tooMany = windowCapProblem(body.limit, leastCost(rule.cost), cap);
    if (tooMany) throw badRequest(`limit: ${tooMany}.`);
    const target = { prefix: admin.config.prefix, rule: rule.name, identityHash };
    const redis = admin.redisOf(identityHash);
    await withDeadline(admin.adminTimeoutMs, async (deadline) => {
      // Announced before it is written: a write the deadline cut short may still land, and every isolate must
      // then read it. Until it lands, a decision that reads no override costs one command more, nothing else.
      admin.liveModes?.overrides?.set(rule.name, identityHash, true);
      await recordWithin(c, deadline, { rule: rule.name, identityHash, override: true });
      const replaced = await fenceReturns(
        target,
        rule.algorithm,
        ruleLimits(rule),
        override,
        redis,
        deadline,
      );
      await putOverride(target, override, body.ttl, redis, admin.redis, deadline);
      admin.forget(rule.name, identityHash);
      await reaimState(target, rule, replaced, override, redis, deadline);
    });
    return c.json({ rule: rule.name, ...show(identityHash, { ...override, ttlSeconds: body.ttl ?? null }) });
  });

  app.get("/overrides/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const identityHash = await resolveIdentityHash(rule, rawIdentity(c.req.url, "overrides", rule.name));
    const key = overrideKey(admin.config.prefix, rule.name, identityHash);
    const stored = await getOverride(key, admin.redisOf(identityHash));
    if (!stored) throw notFound(`No override for this identity under rule ${JSON.stringify(rule.name)}.`);
    return c.json({ rule: rule.name, ...show(identityHash, stored) });
  });

  app.delete("/overrides/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const identityHash = await resolveIdentityHash(rule, rawIdentity(c.req.url, "overrides", rule.name));
    const target = { prefix: admin.config.prefix, rule: rule.name, identityHash };
    const redis = admin.redisOf(identityHash);
    await withDeadline(admin.adminTimeoutMs, async (deadline) => {
      const replaced = await fenceReturns(
        target,
        rule.algorithm,
        ruleLimits(rule),
        undefined,
        redis,
        deadline,
      );
      const existed = await deleteOverride(target, redis, admin.redis, deadline);
      if (!existed) throw notFound(`No override for this identity under rule ${JSON.stringify(rule.name)}.`);
      admin.forget(rule.name, identityHash);
      admin.liveModes?.overrides?.set(rule.name, identityHash, false);
      await recordWithin(c, deadline, { rule: rule.name, identityHash, override: false });
      await reaimState(target, rule, replaced, undefined, redis, deadline);
    });
    return c.body(null, 204);
  });
}
