import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig, type Plugin } from "vitest/config";

/** Imports `*.lua` as text in the Node-side tests, as wrangler's Text rule does in the Worker. */
const luaAsText: Plugin = {
  name: "lua-as-text",
  transform(code, id) {
    return id.endsWith(".lua") ? { code: `export default ${JSON.stringify(code)};`, map: null } : null;
  },
};

// Two projects: Node-side tests (the local REST server, the Lua script on real Redis, process-level
// failure tests) and the Worker's tests, which run inside workerd. One global setup starts a real
// redis-server and the local Upstash-compatible REST server for both.
export default defineConfig({
  test: {
    globalSetup: ["test/global-setup.ts"],
    reporters: ["default", ["json", { outputFile: "test-results.json" }]],
    projects: [
      {
        plugins: [luaAsText],
        test: {
          name: "node",
          include: ["test/node/**/*.test.ts"],
          environment: "node",
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              // vitest's own runner imports node:* modules inside workerd.
              compatibilityFlags: ["nodejs_compat"],
              bindings: {
                UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
                UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
                ORIGIN_URL: inject("originUrl"),
                // A loaded 2-core CI box can take longer than production's 200 ms budget to answer hundreds
                // of concurrent decisions; the counting tests prove exactness, not the fail-open path (tests
                // of the budget set their own).
                RATE_LIMIT_TIMEOUT_MS: "5000",
              },
            },
          })),
        ],
        test: {
          name: "worker",
          include: ["test/worker/**/*.test.ts"],
          testTimeout: 30_000,
        },
      },
    ],
  },
});
