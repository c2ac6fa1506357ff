/**
 * Target (b+): a bare proxy doing, with nothing decided, the per-request work docs/configuration.md
 * ("Responses") asks of ANY proxy in Floodgate's place: hop-by-hop fields dropped both ways,
 * `X-Forwarded-For/-Proto/-Host` toward the origin, a bound on the wait for the origin's headers (one timer, cleared when they arrive), and the five
 * rate-limit headers plus `Server-Timing` on the answer (fixed values). A request decided from a lease does
 * this and spends its lease: (b+) ÷ (b) is what that contract costs, (c) ÷ (b+) what Floodgate's own code
 * costs on top.
 */
import { Hono } from "hono";
import { clientIp } from "./forward.mjs";

/** Floodgate's `ORIGIN_TIMEOUT_MS` default. */
const ORIGIN_TIMEOUT_MS = 30_000;
const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];

const app = new Hono();
app.all("*", async (c) => {
  const url = new URL(c.req.url);
  const headers = new Headers(c.req.raw.headers);
  for (const name of HOP_BY_HOP) headers.delete(name);
  headers.delete("host");
  headers.set("X-Forwarded-For", clientIp(c));
  headers.set("X-Forwarded-Proto", url.protocol.slice(0, -1));
  headers.set("X-Forwarded-Host", url.host);
  const init = { method: c.req.method, headers, body: c.req.raw.body, redirect: "manual" };
  const answer = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("origin timeout")), ORIGIN_TIMEOUT_MS);
    fetch(`${c.env.ORIGIN_URL}${url.pathname}${url.search}`, init).then(
      (response) => {
        clearTimeout(timer);
        resolve(response);
      },
      (error) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
  const response = new Response(answer.body, answer);
  const fields = response.headers;
  for (const name of HOP_BY_HOP) fields.delete(name);
  fields.set("RateLimit-Policy", '"bench-ip";q=1000000;w=60');
  fields.set("RateLimit", '"bench-ip";r=999999;t=60');
  fields.set("X-RateLimit-Limit", "1000000");
  fields.set("X-RateLimit-Remaining", "999999");
  fields.set("X-RateLimit-Reset", "60");
  fields.append("Server-Timing", 'ratelimit;dur=0;desc="lease"');
  return response;
});
export default app;
