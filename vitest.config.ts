import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig, type Plugin } from "vitest/config";

/** Imports `*.lua` as text in the Node-side tests, as wrangler's Text rule does in the Worker. */
const luaAsText: Plugin = {
  name: "lua-as-text",
  transform(code, id) {
    return id.endsWith(".lua") ? { code: `export default ${JSON.stringify(code)};`, map: null } : null;
  },
};

/**
 * Files run two at a time: vitest's default on a 2-core machine is one (cores - 1), while most files spend their
 * time waiting (windows, timeouts, leases, workerd starting), not computing. Projects that run side by side must
 * say the same.
 */
const FILES_AT_ONCE = 2;

/**
 * Files that time themselves against the machine (latency bounds, bursts counted within a wall-clock span,
 * hundreds of concurrent decisions within a budget, the simulator's interleavings): each runs alone, after the
 * rest, as the whole suite did before.
 */
const ALONE = {
  node: [
    "test/node/simulation.test.ts",
    "test/node/simulation-regions.test.ts",
    "test/node/path-match.test.ts",
    "test/node/engine-groups.test.ts",
    "test/node/engine-refund-period.test.ts",
    "test/node/leases-decider.test.ts",
    "test/node/scale-worker.test.ts",
    "test/node/two-workers-shaping.test.ts",
    "test/node/fuzz-parsers.test.ts",
    "test/node/resilience-decider.test.ts",
    "test/node/redis-rest-rtt.test.ts",
    "test/node/request-path-rtt.test.ts",
    "test/node/async-rules.test.ts",
    "test/node/failopen-burst.test.ts",
  ],
  worker: [
    "test/worker/proxy-limits.test.ts",
    "test/worker/proxy-shed.test.ts",
    "test/worker/dashboard-signout.test.ts",
  ],
};

/**
 * The Node-side projects' settings. `expect.poll` waits up to 5 s by default (vitest's 1 s is one busy second of
 * a loaded 2-core machine: a page's refresh, a flush in `waitUntil`); a poll that must be quicker says so.
 */
const nodeProject = {
  environment: "node",
  testTimeout: 30_000,
  hookTimeout: 60_000,
  expect: { poll: { timeout: 5000 } },
} as const;

/** The Worker's tests run inside workerd, with the run's Redis and origin. */
const workerd = () =>
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
  }));

// Node-side tests (the local REST server, the Lua script on real Redis, process-level failure tests) and the
// Worker's tests, which run inside workerd, each in two projects: "node" and "worker" side by side, "node-alone"
// and "worker-alone" (one worker and the default group order: vitest runs their files one by one after every
// other group). One global setup starts a real redis-server and the local Upstash-compatible REST server for all.
export default defineConfig({
  test: {
    globalSetup: ["test/global-setup.ts"],
    reporters: ["default", ["json", { outputFile: "test-results.json" }]],
    projects: [
      {
        plugins: [luaAsText],
        test: {
          ...nodeProject,
          name: "node",
          include: ["test/node/**/*.test.ts"],
          exclude: ALONE.node,
          maxWorkers: FILES_AT_ONCE,
        },
      },
      {
        plugins: [luaAsText],
        test: { ...nodeProject, name: "node-alone", include: ALONE.node, maxWorkers: 1 },
      },
      {
        plugins: [workerd()],
        test: {
          name: "worker",
          include: ["test/worker/**/*.test.ts"],
          exclude: ALONE.worker,
          testTimeout: 30_000,
          maxWorkers: FILES_AT_ONCE,
        },
      },
      {
        plugins: [workerd()],
        test: { name: "worker-alone", include: ALONE.worker, testTimeout: 30_000, maxWorkers: 1 },
      },
    ],
  },
});
