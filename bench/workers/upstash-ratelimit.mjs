/**
 * Target (e): a Worker of the same shape that limits with @upstash/ratelimit (slidingWindow) through
 * @upstash/redis over the same REST server. Client and limiter are built per request, as the baseline
 * did: workerd forbids sharing I/O objects (the SDK's auto-pipeline batches) between requests.
 */
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis/cloudflare";
import { Hono } from "hono";
import { clientIp, forward } from "./forward.mjs";

const app = new Hono();
app.all("*", async (c) => {
  const redis = new Redis({
    url: c.env.UPSTASH_REDIS_REST_URL,
    token: c.env.UPSTASH_REDIS_REST_TOKEN,
    enableTelemetry: false,
  });
  const limiter = new Ratelimit({
    redis,
    limiter: Ratelimit.slidingWindow(Number(c.env.LIMIT), c.env.WINDOW ?? "60 s"),
    prefix: c.env.PREFIX ?? "bench:e",
  });
  const { success } = await limiter.limit(clientIp(c));
  if (!success) return c.text("Too Many Requests", 429);
  return forward(c);
});
export default app;
