/**
 * Target (b'): the bare proxy plus one hand-written `fetch` of an EVALSHA per request, the physical limit
 * of a Redis-decided request over REST. The script is a minimal fixed window (INCR, PEXPIRE on the first
 * hit) loaded by the harness; its SHA arrives as the EVALSHA_SHA binding.
 */
import { Hono } from "hono";
import { clientIp, forward } from "./forward.mjs";

const app = new Hono();
app.all("*", async (c) => {
  const response = await fetch(c.env.UPSTASH_REDIS_REST_URL, {
    method: "POST",
    headers: {
      authorization: `Bearer ${c.env.UPSTASH_REDIS_REST_TOKEN}`,
      "content-type": "application/json",
    },
    body: JSON.stringify(["EVALSHA", c.env.EVALSHA_SHA, 1, `bench:b:${clientIp(c)}`, 60_000]),
  });
  const { result, error } = await response.json();
  if (error) return c.text(error, 500);
  if (result > Number(c.env.LIMIT)) return c.text("Too Many Requests", 429);
  return forward(c);
});
export default app;
