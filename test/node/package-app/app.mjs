// The README's middleware example, as a fresh user pastes it (test/node/package.test.ts installs the
// packed tarball next to this file, outside the repository). `redisOf` reads the credentials: from the
// bindings on Workers, from process.env on Node.
import { Hono } from "hono";
import { rateLimit } from "hono-floodgate";

export function makeApp(redisOf, prefix) {
  const app = new Hono();
  app.use(
    "/api/*",
    rateLimit((c) => ({
      redis: redisOf(c),
      prefix,
      // The tests' machine is shared and loaded; production keeps the 200 ms default.
      timeoutMs: 5000,
      rules: [
        { name: "per-client", key: "header:x-client", algorithm: "fixed-window", limit: 3, period: "1m" },
      ],
    })),
  );
  app.get("/api/hello", (c) => c.json({ hello: "world", rateLimit: c.get("rateLimit") }));
  return app;
}
