/**
 * What Cloudflare knows about a request (`request.cf`), as key parts `cf:country`, `cf:asn`, `cf:colo` and
 * `cf:ja4` read it (docs/protect.md, "Keys from Cloudflare's request facts"). Cloudflare sets these at its
 * edge; a client cannot. Off Cloudflare (the middleware on Node, a test without Miniflare's `cf` option)
 * there is no `request.cf`, and every such part is missing: the rule's `missing` decides.
 */

import type { CfField } from "../config";

/** The `cf` object of a request, when the runtime gave it one (workerd does; Node's fetch does not). */
export const cfOf = (request: Request): Record<string, unknown> | undefined => {
  const cf = (request as { cf?: unknown }).cf;
  return cf !== null && typeof cf === "object" ? (cf as Record<string, unknown>) : undefined;
};

/**
 * One fact as text, or `undefined` when the request has none: `country` (ISO 3166-1 alpha-2, `T1` for Tor),
 * `asn` (the autonomous system number, in decimal), `colo` (the IATA code of the data center), `ja4` (the TLS
 * client's JA4 fingerprint: Bot Management's `botManagement.ja4`, present on plans that have it).
 */
export function cfFact(request: Request, field: CfField): string | undefined {
  const cf = cfOf(request);
  if (cf === undefined) return undefined;
  const value = field === "ja4" ? botManagementOf(cf)?.ja4 : cf[field];
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : undefined;
  if (typeof value !== "string") return undefined;
  const trimmed = value.trim();
  return trimmed === "" ? undefined : trimmed;
}

const botManagementOf = (cf: Record<string, unknown>): Record<string, unknown> | undefined => {
  const bm = cf.botManagement;
  return bm !== null && typeof bm === "object" ? (bm as Record<string, unknown>) : undefined;
};
