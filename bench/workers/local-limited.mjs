/**
 * Target (l+): (l) behind Floodgate's middleware (`rateLimit()` from src/middleware, one sliding-window
 * rule, limits far above the load): one hot identity, so after its first lease every decision is local.
 * (l+) − (l) is the limiter's cost per leased request as workerd runs it for real (each request a first
 * pass through the code), where bench/limiter-loop.mjs measures the same code warm in a loop.
 */
import { Hono } from "hono";
import { rateLimit } from "../../src/middleware";
import { clientIp } from "./forward.mjs";

const rules = [
  { name: "bench-ip", key: "ip", algorithm: "sliding-window", limit: 1_000_000_000, period: "1h" },
];
let app;

export default {
  fetch(request, env, ctx) {
    // Built on the first request: `Date.now()` is fixed at module scope in workerd.
    if (!app) {
      const redis = { url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN };
      app = new Hono();
      app.use("*", rateLimit({ redis, prefix: `bench-l-${Date.now()}`, rules }));
      app.get("*", (c) => c.text(clientIp(c) && new URL(c.req.url).pathname ? "ok" : "no"));
    }
    return app.fetch(request, env, ctx);
  },
};
