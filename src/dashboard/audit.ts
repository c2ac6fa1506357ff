/**
 * The audit trail of admin changes (docs/operating.md, "Audit trail"): who (the admin token, or a dashboard
 * session by a short fingerprint of its nonce), when, what, and the value before and after, for every live
 * mode switch, reset, override or label set or removed, and live list edit that succeeded, whether from the page
 * or with curl.
 *
 * Recorded by a middleware in front of the admin API's own routes, so those routes stay as they are: it reads
 * the value before (one read, waited for at most 300 ms), lets the route run, and on success appends one
 * entry to a capped list at
 * `<prefix>:audit` (LPUSH, LTRIM, EXPIRE in one pipeline, in the background: a change never fails or waits for
 * its record). `GET /__floodgate/audit?limit=<1..1000>` reads it, newest first. Entries name identities only
 * by hash.
 */
import type { Context, Hono, Next } from "hono";
import type { AdminContext, AdminEnv } from "../admin/context";
import { findRule } from "../admin/context";
import { sessionEpochOf, sessionOf } from "../admin/csrf";
import { rawIdentity, resolveIdentityHash, showHash } from "../admin/identity";
import { checkEntries, readList } from "../admin/lists";
import { getOverride } from "../admin/overrides";
import { formatPeriod } from "../admin/period";
import { badRequest } from "../admin/problem";
import { overrideKey } from "../engine/keys";
import { readLiveModes } from "../live/modes";
import { readLabel } from "./labels";
import { within } from "../util/timer";

/** Entries kept, newest first. */
export const AUDIT_ENTRIES = 1000;
/** How long the trail outlives its last entry, s (every key has a TTL). */
export const AUDIT_TTL_SECONDS = 30 * 24 * 60 * 60;

export const auditKey = (prefix: string): string => `${prefix}:audit`;

/** One entry, as `GET /audit` answers it. */
export interface AuditEntry {
  /** ISO time the change was answered. */
  at: string;
  /** `admin token`, or `session <8 hex>`. */
  who: string;
  /** In words: `mode of rule api`, `global mode`, `reset of hash:… under api`, `override of hash:… under api`. */
  what: string;
  rule?: string;
  identity?: string;
  /** The value before and after (a mode, an override, `null` for none); absent for a reset. */
  before?: unknown;
  after?: unknown;
}

/** What a request changes, and how to read its value before. */
interface Change {
  what: string;
  rule?: string;
  identity?: string;
  before?: () => Promise<unknown>;
  after?: (body: Record<string, unknown>) => unknown;
}

/** Registers the recording middleware and `GET /audit` (behind the admin gate). */
export function auditRoutes(app: Hono<AdminEnv>): void {
  app.use("*", async function audit(c: Context<AdminEnv>, next: Next) {
    const admin = c.get("admin");
    const change = await changeOf(c, admin).catch(() => undefined); // a bad request is the route's to answer
    if (!change) return next();
    // The value before, and who: each waits at most `BEFORE_WAIT_MS`, so a slow Redis delays a change by no
    // more than that (the change's own wait is the admin timeout); past it, the entry says "unknown".
    const [before, who] = await Promise.all([
      bounded(change.before ? change.before() : Promise.resolve(undefined), "unknown"),
      bounded(whoOf(c, admin), "session"),
    ]);
    await next();
    if (!c.res.ok) return;
    const body = (await c.res
      .clone()
      .json()
      .catch(() => ({}))) as Record<string, unknown>;
    const entry: AuditEntry = {
      at: new Date().toISOString(),
      who,
      what: change.what,
      ...(change.rule === undefined ? {} : { rule: change.rule }),
      ...(change.identity === undefined ? {} : { identity: change.identity }),
      ...(change.before ? { before: before ?? null, after: change.after?.(body) ?? null } : {}),
    };
    const key = auditKey(admin.config.prefix);
    const write = admin.redis
      .pipeline([
        ["lpush", key, JSON.stringify(entry)],
        ["ltrim", key, 0, AUDIT_ENTRIES - 1],
        ["expire", key, AUDIT_TTL_SECONDS],
      ])
      .catch((error: unknown) => {
        const name = error instanceof Error ? error.name : typeof error;
        console.error(JSON.stringify({ event: "audit_write_failed", error: name }));
      });
    c.executionCtx.waitUntil(write);
  });

  app.get("/audit", async (c) => {
    const admin = c.get("admin");
    const limit = Number(c.req.query("limit") ?? 100);
    if (!Number.isInteger(limit) || limit < 1 || limit > AUDIT_ENTRIES)
      throw badRequest(`\`limit\` is a whole number from 1 to ${AUDIT_ENTRIES}.`);
    const raw = await admin.redis.send(["lrange", auditKey(admin.config.prefix), 0, limit - 1]);
    const entries = (Array.isArray(raw) ? raw : []).flatMap((text) => {
      try {
        return [JSON.parse(String(text)) as AuditEntry];
      } catch {
        return [];
      }
    });
    return c.json({ entries });
  });
}

/** The longest the audit waits for a value before the change (or for who made it), ms. */
const BEFORE_WAIT_MS = 300;

/** `promise`'s value, or `fallback` when it fails or takes longer than `BEFORE_WAIT_MS`. */
async function bounded<T>(promise: Promise<T>, fallback: T): Promise<T> {
  const value = await within(
    promise.catch(() => fallback),
    BEFORE_WAIT_MS,
  );
  return value === undefined ? fallback : value;
}

/** The change a request makes, or undefined for one that changes nothing audited. */
async function changeOf(c: Context<AdminEnv>, admin: AdminContext): Promise<Change | undefined> {
  const method = c.req.method;
  const path = new URL(c.req.url).pathname;
  const segments = path.split("/");
  if (method === "PUT" && path.endsWith("/mode")) {
    const body = (await c.req.raw.clone().json()) as { rule?: unknown };
    const names = admin.config.rules.map((r) => r.name);
    const live = () => readLiveModes(admin.redis, admin.config.prefix, names);
    if (typeof body.rule === "string") {
      const rule = findRule(admin, body.rule).name;
      return {
        what: `mode of rule ${rule}`,
        rule,
        before: async () => (await live()).rules[rule] ?? null,
        after: (res) =>
          (res.rules as Array<{ name: string; mode: { live: unknown } }> | undefined)?.find(
            (r) => r.name === rule,
          )?.mode.live,
      };
    }
    return {
      what: "global mode",
      before: async () => (await live()).global ?? null,
      after: (res) => (res.mode as { live?: unknown } | undefined)?.live,
    };
  }
  // `/__floodgate/lists/:name`: the list's segment is the admin path's first.
  if (segments[2] === "lists" && segments[3] && ["PUT", "PATCH", "DELETE"].includes(method)) {
    return listChangeOf(c, admin, decodeURIComponent(segments[3]));
  }
  const kind = (["keys", "overrides", "labels"] as const).find((k) => segments.includes(k));
  if (!kind) return undefined;
  const ruleName = segments[segments.indexOf(kind) + 1];
  if (!ruleName || segments.length < segments.indexOf(kind) + 3) return undefined;
  const rule = findRule(admin, decodeURIComponent(ruleName));
  const hash = await resolveIdentityHash(rule, rawIdentity(c.req.url, kind, rule.name));
  const identity = showHash(hash);
  if (kind === "keys" && method === "DELETE")
    return { what: `reset of ${identity} under ${rule.name}`, rule: rule.name, identity };
  if (kind === "labels" && (method === "PUT" || method === "DELETE")) {
    return {
      what: `label of ${identity} under ${rule.name}`,
      rule: rule.name,
      identity,
      before: () => readLabel(admin, rule.name, hash),
      after: (res) => (method === "DELETE" ? null : res.label),
    };
  }
  if (kind === "overrides" && (method === "PUT" || method === "DELETE")) {
    const key = overrideKey(admin.config.prefix, rule.name, hash);
    return {
      what: `override of ${identity} under ${rule.name}`,
      rule: rule.name,
      identity,
      before: async () => {
        const stored = await getOverride(key, admin.redisOf(hash));
        return stored && showOverride(stored);
      },
      after: (res) =>
        method === "DELETE"
          ? null
          : { limit: res.limit, period: res.period ?? null, burst: res.burst, ttl: res.ttl ?? null },
    };
  }
  return undefined;
}

/** Entries named in a list change's entry, at most: a 100,000-entry PUT is summed up by its count. */
const AUDITED_ENTRIES = 20;

/**
 * A live list's change (docs/lists.md): its count before and after, and the entries the request named (the
 * first AUDITED_ENTRIES of each kind), canonical as the list holds them: identities hashed, never raw.
 */
async function listChangeOf(c: Context<AdminEnv>, admin: AdminContext, name: string): Promise<Change> {
  const method = c.req.method;
  const body =
    method === "DELETE"
      ? {}
      : ((await c.req.raw
          .clone()
          .json()
          .catch(() => ({}))) as Record<string, unknown>);
  const named = async (field: string, value: unknown) => {
    if (!Array.isArray(value)) return undefined;
    const entries = await checkEntries(field, value.slice(0, AUDITED_ENTRIES), undefined);
    const shown = entries.map((e) => e.member);
    return value.length > AUDITED_ENTRIES ? [...shown, `… ${value.length - AUDITED_ENTRIES} more`] : shown;
  };
  const [added, removed] = await Promise.all([
    named("add", method === "PUT" ? body.entries : body.add),
    named("remove", body.remove),
  ]);
  const what = { PUT: "replacement", PATCH: "edit", DELETE: "emptying" }[method] ?? "change";
  return {
    what: `${what} of list ${name}`,
    before: async () => ({ count: (await readList(admin.redis, admin.config.prefix, name, 1)).count }),
    after: (res) => ({
      count: res.count,
      ...(added && { [method === "PUT" ? "entries" : "added"]: added }),
      ...(removed && { removed }),
    }),
  };
}

const showOverride = (o: { limit: number; periodMs?: number; burst: number; ttlSeconds: number | null }) => ({
  limit: o.limit,
  period: o.periodMs === undefined ? null : formatPeriod(o.periodMs),
  burst: o.burst,
  ttl: o.ttlSeconds,
});

/** Who made a change: the admin token (Bearer), or a dashboard session, by a fingerprint of its nonce. */
async function whoOf(c: Context<AdminEnv>, admin: AdminContext): Promise<string> {
  if (c.req.header("Authorization")) return "admin token";
  const token = admin.config.adminToken;
  const session = token
    ? await sessionOf(c.req.raw, token, () => sessionEpochOf(admin)).catch(() => undefined)
    : undefined;
  if (!session) return "session";
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(session.nonce));
  const hex = [...new Uint8Array(digest).slice(0, 4)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `session ${hex}`;
}
