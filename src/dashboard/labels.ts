/**
 * Labels an operator gives a hashed identity under a rule ("acme-prod", "the scraper from ticket 4411"),
 * shown next to it wherever the dashboard lists it (docs/operating.md, "Labels"). Only hashes are keys: a
 * label is stored under the identity's hash, never its value. Each label has a TTL (default 30 days).
 *
 * One hash at `<prefix>:labels`, field `<rule>:<hash>` = `<expires at, ms>|<label>`, so the page reads every
 * label it needs with one HMGET (one key, one slot on a Redis Cluster). A field past its expiry is ignored;
 * the hash itself expires with its longest-lived label (every key has a TTL).
 *
 *   PUT    /__floodgate/labels/:rule/:identity   body { "label": "<1..64 characters>", "ttl"?: seconds }
 *   DELETE /__floodgate/labels/:rule/:identity
 */
import type { Hono } from "hono";
import type { AdminContext, AdminEnv } from "../admin/context";
import { findRule } from "../admin/context";
import { rawIdentity, resolveIdentityHash, showHash } from "../admin/identity";
import { badRequest } from "../admin/problem";
import { hashValues } from "../live/modes";

/** A label's default life, s. */
export const LABEL_TTL_SECONDS = 30 * 24 * 60 * 60;
const MAX_LABEL_TTL_SECONDS = 365 * 24 * 60 * 60;
const MAX_LABEL_LENGTH = 64;

export const labelsKey = (prefix: string): string => `${prefix}:labels`;
const fieldOf = (rule: string, identityHash: string) => `${rule}:${identityHash}`;

/** The label stored in one field, or undefined when absent or expired. */
export function labelOf(value: unknown, nowMs = Date.now()): string | undefined {
  if (typeof value !== "string") return undefined;
  const bar = value.indexOf("|");
  const until = Number(value.slice(0, bar));
  return bar > 0 && until > nowMs ? value.slice(bar + 1) : undefined;
}

/** The labels of these (rule, hash) pairs, by `<rule>:<hash>`; one HMGET (none for no pairs). */
export async function readLabels(
  admin: AdminContext,
  wanted: Array<{ rule: string; identityHash: string }>,
): Promise<Map<string, string>> {
  const fields = [...new Set(wanted.map((w) => fieldOf(w.rule, w.identityHash)))];
  const labels = new Map<string, string>();
  if (fields.length === 0) return labels;
  const values = hashValues(
    await admin.redis.send(["hmget", labelsKey(admin.config.prefix), ...fields]),
    fields,
  );
  fields.forEach((field, i) => {
    const label = labelOf(values[i]);
    if (label !== undefined) labels.set(field, label);
  });
  return labels;
}

/** One identity's label now, or null (what the audit records before a change). */
export async function readLabel(
  admin: AdminContext,
  rule: string,
  identityHash: string,
): Promise<string | null> {
  const reply = await admin.redis.send(["hget", labelsKey(admin.config.prefix), fieldOf(rule, identityHash)]);
  return labelOf(reply) ?? null;
}

/** Registers the label routes (behind the admin gate). */
export function labelRoutes(app: Hono<AdminEnv>): void {
  app.put("/labels/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const identityHash = await resolveIdentityHash(rule, rawIdentity(c.req.url, "labels", rule.name));
    const body = (await c.req.json().catch(() => null)) as { label?: unknown; ttl?: unknown } | null;
    const label = typeof body?.label === "string" ? body.label.trim() : "";
    // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it refuses
    if (!label || label.length > MAX_LABEL_LENGTH || /[\u0000-\u001f\u007f]/.test(label))
      throw badRequest(`label: 1 to ${MAX_LABEL_LENGTH} characters on one line.`);
    const ttl = body?.ttl ?? LABEL_TTL_SECONDS;
    if (typeof ttl !== "number" || !Number.isInteger(ttl) || ttl < 1 || ttl > MAX_LABEL_TTL_SECONDS)
      throw badRequest(`ttl: whole seconds from 1 to ${MAX_LABEL_TTL_SECONDS}.`);
    const key = labelsKey(admin.config.prefix);
    await admin.redis.pipeline([
      ["hset", key, fieldOf(rule.name, identityHash), `${Date.now() + ttl * 1000}|${label}`],
      // The hash lives as long as its longest-lived label: a first TTL (NX), or a longer one (GT).
      ["expire", key, ttl, "nx"],
      ["expire", key, ttl, "gt"],
    ]);
    return c.json({ rule: rule.name, identity: showHash(identityHash), label, ttl });
  });

  app.delete("/labels/:rule/*", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const identityHash = await resolveIdentityHash(rule, rawIdentity(c.req.url, "labels", rule.name));
    const removed = await admin.redis.send([
      "hdel",
      labelsKey(admin.config.prefix),
      fieldOf(rule.name, identityHash),
    ]);
    return c.json({ rule: rule.name, identity: showHash(identityHash), removed: Number(removed) > 0 });
  });
}
