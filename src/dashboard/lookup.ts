/**
 * `POST /__floodgate/lookup/:rule` with body `{ "identity": "<value>" }`: the page's read-only Look up. It
 * hashes the value exactly as the proxy does and answers what `GET /__floodgate/keys/:rule/hash:<hash>`
 * answers (nothing is counted or written). A POST, so the raw value travels in a body and never in a URL,
 * where request logs and browser history would keep it; the value is neither stored nor logged.
 */
import type { Hono } from "hono";
import type { AdminEnv } from "../admin/context";
import { findRule } from "../admin/context";
import { resolveIdentityHash, showHash } from "../admin/identity";
import { badRequest } from "../admin/problem";

/** The longest value looked up, characters: far above any header, query value or IP a rule keys on. */
const MAX_IDENTITY_LENGTH = 4096;

/** Registers the look-up route (behind the admin gate). */
export function lookupRoutes(app: Hono<AdminEnv>): void {
  app.post("/lookup/:rule", async (c) => {
    const admin = c.get("admin");
    const rule = findRule(admin, c.req.param("rule"));
    const body = (await c.req.json().catch(() => null)) as { identity?: unknown } | null;
    const identity = body?.identity;
    if (typeof identity !== "string" || identity === "" || identity.length > MAX_IDENTITY_LENGTH)
      throw badRequest(`The body is { "identity": "<the value the rule's key extracts, or hash:…>" }.`);
    const named = showHash(await resolveIdentityHash(rule, identity));
    // The same answer as the key route, by the hash: one way to read a state.
    const url = new URL(c.req.url);
    const path = `/keys/${encodeURIComponent(rule.name)}/${encodeURIComponent(named)}`;
    const headers = new Headers();
    for (const name of ["Authorization", "Cookie"]) {
      const value = c.req.header(name);
      if (value) headers.set(name, value);
    }
    // This app's own routes answer unprefixed paths (the Worker mounts it at the admin prefix).
    return app.request(`${url.origin}${path}`, { headers }, c.env, c.executionCtx);
  });
}
