/**
 * `/lists/:name` (PUT, PATCH, GET, DELETE): the live lists rules read with `match.list` (docs/lists.md).
 * GET takes `?limit=<n>`: the first n entries (the soonest to expire first), `count` still of all.
 * PUT replaces a list (`{ "entries": [...], "ttl"? }`), PATCH removes then adds entries
 * (`{ "add"?: [...], "remove"?: [...], "ttl"? }`); an entry is a string or `{ "entry", "ttl" }`. Every
 * entry is checked first: one bad entry, or more than a list may hold, is a 400 naming it and nothing is
 * written. This isolate reads the new list at once; every other within about a second (src/live/lists.ts).
 */
import type { Context, Hono } from "hono";
import { LIST_NAME } from "../config";
import type { AdminEnv } from "./context";
import { checkEntries, deleteList, type ListChange, MAX_LIST_ENTRIES, readList, writeList } from "./lists";
import { AdminError, badRequest } from "./problem";

/** Longest body a list request may send, bytes: 100,000 entries of an address with a TTL fit many times over. */
const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** Registers the list routes on the admin app. */
export function listRoutes(app: Hono<AdminEnv>): void {
  app.get("/lists/:name", async (c) => {
    const admin = c.get("admin");
    const name = listName(c);
    const limitText = c.req.query("limit");
    const limit = limitText === undefined ? undefined : Number(limitText);
    if (limit !== undefined && (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_ENTRIES))
      throw badRequest(`limit: must be a whole number from 1 to ${MAX_LIST_ENTRIES}`);
    const { version, count, entries } = await readList(admin.redis, admin.config.prefix, name, limit);
    return c.json({ name, count, version, used_by: usedBy(c, name), entries });
  });

  app.put("/lists/:name", async (c) => {
    const name = listName(c);
    const body = await bodyOf(c, ["entries", "ttl"]);
    if (body.entries === undefined) throw badRequest("entries: required (an array; [] empties the list)");
    const add = await checkEntries("entries", body.entries, body.ttl);
    return write(c, name, { kind: "replace", add, remove: [] });
  });

  app.patch("/lists/:name", async (c) => {
    const name = listName(c);
    const body = await bodyOf(c, ["add", "remove", "ttl"]);
    if (body.add === undefined && body.remove === undefined)
      throw badRequest("body: give add, remove or both");
    const add = body.add === undefined ? [] : await checkEntries("add", body.add, body.ttl);
    const remove =
      body.remove === undefined ? [] : await checkEntries("remove", body.remove, undefined, false);
    return write(c, name, { kind: "patch", add, remove });
  });

  app.delete("/lists/:name", async (c) => {
    const admin = c.get("admin");
    const name = listName(c);
    const version = await deleteList(admin.redis, admin.config.prefix, name);
    admin.lists?.load(name, (p) => c.executionCtx.waitUntil(p));
    return c.json({ name, count: 0, version, used_by: usedBy(c, name) });
  });
}

async function write(c: Context<AdminEnv>, name: string, change: ListChange) {
  const admin = c.get("admin");
  const result = await writeList(admin.redis, admin.config.prefix, name, change);
  if (!result.written) {
    throw badRequest(
      `The list would hold ${result.count} entries, more than a list may hold (${MAX_LIST_ENTRIES}); nothing was changed.`,
    );
  }
  // This isolate reads it now; the others when their next read of the live modes shows the new version.
  admin.lists?.load(name, (p) => c.executionCtx.waitUntil(p));
  return c.json({ name, count: result.count, version: result.version, used_by: usedBy(c, name) });
}

/** The list named in the path, or a 400. */
function listName(c: Context<AdminEnv>): string {
  const name = c.req.param("name") ?? "";
  if (!LIST_NAME.test(name))
    throw badRequest(`${JSON.stringify(name.slice(0, 80))} is not a list name ([A-Za-z0-9_-]{1,64})`);
  return name;
}

/** The rules reading a list: none means a typo, or a list prepared before its rule. */
function usedBy(c: Context<AdminEnv>, name: string): string[] {
  const { rules, actions = [] } = c.get("admin").config;
  return [...actions, ...rules].filter((rule) => rule.match.list === name).map((rule) => rule.name);
}

/** The JSON body, an object with only the `known` members; a 400 naming what is wrong, 413 when too big. */
async function bodyOf(c: Context<AdminEnv>, known: readonly string[]): Promise<Record<string, unknown>> {
  const length = Number(c.req.header("content-length") ?? 0);
  if (length > MAX_BODY_BYTES) throw tooLarge();
  const text = await c.req.text();
  if (text.length > MAX_BODY_BYTES) throw tooLarge();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw badRequest("The body must be JSON.");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw badRequest("body: expected an object");
  const unknown = Object.keys(body).find((key) => !known.includes(key));
  if (unknown !== undefined) throw badRequest(`${unknown}: unknown field (expected ${known.join(", ")})`);
  return body as Record<string, unknown>;
}

const tooLarge = () =>
  new AdminError(413, "Content Too Large", `A list request's body is at most ${MAX_BODY_BYTES} bytes.`);
