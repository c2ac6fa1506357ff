/**
 * `/blocks/:rule`: the identities a rule with a `block` keeps out now (docs/protect.md, "Penalty box"), hashed
 * (raw identities are never stored), each with the seconds its block has left; paged like the overrides' list
 * (a SCAN of every endpoint, never KEYS). `DELETE /keys/:rule/hash:<hash>` lifts one (routes-keys.ts).
 */
import type { Hono } from "hono";
import { stateKey } from "../engine/keys";
import type { RedisPort } from "../engine/redis";
import { type AdminEnv, findRule } from "./context";
import { showHash } from "./identity";
import { escapeGlob, isCursor, pageOver, scanPage } from "./overrides";
import { formatPeriod } from "./period";
import { badRequest } from "./problem";

const DEFAULT_PAGE_SIZE = 100;
const MAX_PAGE_SIZE = 1000;

const badCursor = () => badRequest("cursor: pass back the `next_cursor` of the previous page.");

/** One blocked identity. */
interface Blocked {
  identityHash: string;
  /** ms its block has left */
  leftMs: number;
}

/** The identity hash of a block key, `<prefix>:<rule>:{<hash>}:block` (src/engine/keys.ts). */
const hashOfBlockKey = (key: string): string | undefined => /:\{([A-Za-z0-9_-]+)\}:block$/.exec(key)?.[1];

/** One page of one endpoint's blocks of `rule`: the keys a SCAN finds, each with its PTTL. */
async function blocksOn(
  redis: RedisPort,
  prefix: string,
  rule: string,
  cursor: string,
  pageSize: number,
): Promise<{ items: Blocked[]; nextCursor: string | null }> {
  // The state key's layout with `*` for the hash: `{` and `}` are literal in a SCAN pattern.
  const match = `${escapeGlob(stateKey(prefix, rule, "\u0000"))}:block`.replace("\u0000", "*");
  const page = await scanPage(redis, match, cursor, pageSize);
  if (page.keys.length === 0) return { items: [], nextCursor: page.nextCursor };
  const left = await redis.pipeline(page.keys.map((key) => ["pttl", key]));
  const items: Blocked[] = [];
  page.keys.forEach((key, i) => {
    const identityHash = hashOfBlockKey(key);
    const leftMs = Number(left[i]);
    // Ended between SCAN and PTTL: not blocked any more.
    if (identityHash !== undefined && leftMs > 0) items.push({ identityHash, leftMs });
  });
  return { items, nextCursor: page.nextCursor };
}

/** Registers the blocks route on the admin app. */
export function blockRoutes(app: Hono<AdminEnv>): void {
  app.get("/blocks/:rule", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    if (rule.blockMs === undefined) {
      throw badRequest(`Rule ${JSON.stringify(rule.name)} has no block (docs/protect.md, "Penalty box").`);
    }
    const cursor = c.req.query("cursor") ?? "0";
    if (!isCursor(cursor, admin.endpoints.length)) throw badCursor();
    const pageSize = Number(c.req.query("limit") ?? DEFAULT_PAGE_SIZE);
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > MAX_PAGE_SIZE) {
      throw badRequest(`limit: must be a whole number from 1 to ${MAX_PAGE_SIZE}.`);
    }
    const listing = pageOver(admin.endpoints, cursor, pageSize, (redis, scan, size) =>
      blocksOn(redis, admin.config.prefix, rule.name, scan, size),
    );
    const page = await listing.catch((error: unknown) => {
      // A number no SCAN handed out (past 64 bits): Redis refuses it, and the fault is the request's.
      if (/invalid cursor/i.test(String((error as Error)?.message))) throw badCursor();
      throw error;
    });
    return c.json({
      rule: rule.name,
      block: formatPeriod(rule.blockMs),
      blocked: page.items.map((item) => ({
        identity: showHash(item.identityHash),
        left: Math.ceil(item.leftMs / 1000),
      })),
      next_cursor: page.nextCursor,
    });
  });
}
