/**
 * The client's address for the middleware (docs/security.md). On Cloudflare Workers it is `CF-Connecting-IP`,
 * which Cloudflare's edge sets and a client cannot. Anywhere else any header is the client's own, so none is
 * trusted unless the app names one (`clientIpHeader`, for a proxy it trusts): the address is the
 * connection's, as the runtime's Hono adapter hands it over, read here without importing any adapter:
 * - @hono/node-server: `c.env.incoming` is Node's request, whose socket knows the peer;
 * - Bun (`Bun.serve({ fetch: app.fetch })`): `c.env` (or `c.env.server`) is the server, `requestIP(request)`;
 * - Deno (`Deno.serve(app.fetch)`): `c.env.remoteAddr.hostname`;
 * or as the app's own `getConnInfo` (Hono's, from `hono/bun`, `@hono/node-server/conninfo`, …) reads it.
 */
import type { Context } from "hono";

/** Hono's `GetConnInfo` (hono/conninfo), as far as it is read here. */
export type GetConnInfo = (c: Context) => { remote: { address?: string | undefined } };

/** Whether this runs on Cloudflare Workers (workerd says so in `navigator.userAgent`). */
export const onCloudflareWorkers = (): boolean =>
  typeof navigator !== "undefined" && navigator.userAgent === "Cloudflare-Workers";

/** The connection's remote address as the adapters above hand it over, or `undefined`. */
export function runtimeAddress(c: Context): string | undefined {
  const env = c.env as Record<string, unknown> | undefined;
  if (!env || typeof env !== "object") return undefined;
  const incoming = env.incoming as { socket?: { remoteAddress?: unknown } } | undefined;
  const nodeAddress = incoming?.socket?.remoteAddress;
  if (typeof nodeAddress === "string") return nodeAddress;
  const server = (typeof env.server === "object" && env.server !== null ? env.server : env) as {
    requestIP?: (request: Request) => { address?: unknown } | null;
  };
  if (typeof server.requestIP === "function") {
    const address = server.requestIP(c.req.raw)?.address;
    if (typeof address === "string") return address;
  }
  const denoAddress = (env.remoteAddr as { hostname?: unknown } | undefined)?.hostname;
  return typeof denoAddress === "string" ? denoAddress : undefined;
}

/**
 * How a request's client address is read, decided once: a `getConnInfo` given, else the adapters' objects.
 * A `getConnInfo` that throws (Hono's own do, without their adapter) gives no address.
 */
export function connectionAddressOf(
  getConnInfo: GetConnInfo | undefined,
): (c: Context) => string | undefined {
  if (!getConnInfo) return runtimeAddress;
  return (c) => {
    try {
      const address = getConnInfo(c).remote.address;
      return typeof address === "string" && address !== "" ? address : undefined;
    } catch {
      return undefined;
    }
  };
}
