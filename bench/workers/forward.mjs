/**
 * The proxy step every benchmark Worker shares: the same `hono/proxy` call, path and query appended to
 * ORIGIN_URL, so the targets differ only in how they limit.
 */
import { proxy } from "hono/proxy";

/** Forwards the request to `env.ORIGIN_URL` and returns the origin's response, streamed. */
export function forward(c) {
  const url = new URL(c.req.url);
  return proxy(`${c.env.ORIGIN_URL}${url.pathname}${url.search}`, c.req.raw);
}

/** The client identity the benchmarks send (the same header Floodgate trusts by default). */
export const clientIp = (c) => c.req.header("cf-connecting-ip") ?? "unknown";
