import { type ChildProcess, execFile, spawn } from "node:child_process";
import { copyFile, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "../..");
const APP_FILES = resolve(import.meta.dirname, "package-app");
const NPM_ENV = { ...process.env, WRANGLER_SEND_METRICS: "false", npm_config_update_notifier: "false" };

/** What a user of the published package installs: nothing but the tarball, hono, wrangler, the Node adapter. */
async function freshApp(tarball: string): Promise<string> {
  const repo = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8"));
  const dir = await mkdtemp(join(tmpdir(), "floodgate-package-app-"));
  for (const file of ["app.mjs", "worker.mjs", "node.mjs", "wrangler.toml"]) {
    await copyFile(join(APP_FILES, file), join(dir, file));
  }
  const manifest = {
    name: "floodgate-package-app",
    private: true,
    type: "module",
    dependencies: {
      "hono-floodgate": `file:${tarball}`,
      hono: repo.devDependencies.hono,
      wrangler: repo.devDependencies.wrangler,
      "@hono/node-server": "^2",
    },
  };
  await writeFile(join(dir, "package.json"), JSON.stringify(manifest, null, 2));
  await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"], {
    cwd: dir,
    env: NPM_ENV,
  });
  return dir;
}

/** Three requests of one client get 200 with the decision in the handler; the fourth a 429. */
async function expectLimited(
  fetchPath: (path: string, init: RequestInit) => Promise<Response>,
  client: string,
) {
  const init = { headers: { "x-client": client } };
  for (const remaining of [2, 1, 0]) {
    const res = await fetchPath("/api/hello", init);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { rateLimit: { remaining: number; policy: string; source: string } };
    expect(body.rateLimit).toMatchObject({ remaining, policy: "per-client", source: "redis" });
    expect(res.headers.get("RateLimit")).toBe(
      `"per-client";r=${remaining};t=${res.headers.get("X-RateLimit-Reset")}`,
    );
  }
  const denied = await fetchPath("/api/hello", init);
  expect(denied.status).toBe(429);
  expect(Number(denied.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
  expect(denied.headers.get("Content-Type")).toBe("application/problem+json");
  expect(await denied.json()).toMatchObject({
    status: 429,
    policy: "per-client",
    "violated-policies": ["per-client"],
  });
}

describe("the npm package, installed from its tarball into a fresh Hono app", () => {
  let work: string;
  let tarball: string;
  let app: string;
  let node: ChildProcess | undefined;
  let files: string[] = [];

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "floodgate-pack-"));
    // `npm pack` builds dist/ through `prepack`, as `npm publish` does.
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", work], {
      cwd: ROOT,
      env: NPM_ENV,
    });
    // The JSON array starts on a line of its own: tsup's build log (prepack) comes first, with colour codes.
    const [packed] = JSON.parse(stdout.slice(stdout.search(/^\[$/m)));
    tarball = join(work, packed.filename);
    files = (packed.files as { path: string }[]).map((f) => f.path).sort();
    app = await freshApp(tarball);
  }, 240_000);

  afterAll(async () => {
    node?.kill();
    await Promise.all([work, app].filter(Boolean).map((dir) => rm(dir, { recursive: true, force: true })));
  });

  it("holds only the built library, its licence and change log: no sources, tests, benchmarks or local tooling", async () => {
    expect(files).toEqual([
      "CHANGELOG.md",
      "LICENSE",
      "README.md",
      "dist/index.d.ts",
      "dist/index.js",
      "package.json",
    ]);
    const size = (await stat(tarball)).size;
    expect(size).toBeGreaterThan(10_000);
    // The file list above is exact; what a dependency bundled in would add is checked exactly below (its
    // import kept). This bound only catches something gross (a source map, a vendored copy of hono).
    expect(size).toBeLessThan(200_000);
    const manifest = JSON.parse(
      await readFile(join(app, "node_modules/hono-floodgate/package.json"), "utf8"),
    );
    expect(manifest.private).toBeUndefined();
    expect(manifest.sideEffects).toBe(false);
    expect(manifest.peerDependencies).toHaveProperty("hono");
    expect(manifest.dependencies).not.toHaveProperty("hono");
    // The Lua script is inlined: nothing for a consumer's bundler to load.
    const code = await readFile(join(app, "node_modules/hono-floodgate/dist/index.js"), "utf8");
    expect(code).not.toMatch(/\.lua["']/);
    expect(code).toContain("redis.call");
    // Every runtime dependency stays an import, resolved from the app's node_modules, never inlined.
    for (const dependency of ["hono", ...Object.keys(manifest.dependencies ?? {})]) {
      expect(code, dependency).toMatch(new RegExp(`from ["']${dependency}(/[^"']*)?["']`));
    }
  });

  it("exports every type its exported signatures use, so an app can name each one", async () => {
    const dts = await readFile(join(app, "node_modules/hono-floodgate/dist/index.d.ts"), "utf8");
    const declared = [...dts.matchAll(/^(?:declare )?(?:abstract )?(?:interface|type|class) (\w+)/gm)].map(
      (m) => m[1],
    );
    const list = dts.match(/^export \{([^}]*)\};/m)?.[1] ?? "";
    const exported = new Set([...list.matchAll(/(?:type )?(\w+)(?: as \w+)?/g)].map((m) => m[1]));
    expect(declared).toContain("ResilientDecider");
    expect(declared.filter((name) => !exported.has(name))).toEqual([]);
  });

  it("loads from CommonJS too: require() of the package gives the same exports as import", async () => {
    // Node ≥ 20.19 / 22.12 load an ES module through require(): the `default` export condition lets them.
    const script = join(app, "require.cjs");
    await writeFile(
      script,
      'const m = require("hono-floodgate"); process.stdout.write(JSON.stringify([typeof m.rateLimit, typeof m.QuotaExceededError]));',
    );
    const { stdout } = await run(process.execPath, [script], { cwd: app });
    expect(JSON.parse(stdout)).toEqual(["function", "function"]);
  });

  it("builds with wrangler and limits on workerd: 200s with the decision on c.var, then 429", async () => {
    const out = join(app, "out");
    await run("npx", ["wrangler", "deploy", "--dry-run", "--outdir", out], { cwd: app, env: NPM_ENV });
    // The bundle wrangler would upload, run in workerd.
    const mf = new Miniflare(
      convertV4MiniflareOptions({
        modules: [
          { type: "ESModule", path: "worker.js", contents: await readFile(join(out, "worker.js"), "utf8") },
        ],
        compatibilityDate: "2026-08-01",
        bindings: {
          UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
          UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
        },
      }),
    );
    try {
      await expectLimited(
        async (path, init) =>
          (await mf.dispatchFetch(`http://app.test${path}`, init as never)) as unknown as Response,
        "workerd-client",
      );
    } finally {
      await mf.dispose();
    }
  }, 90_000);

  it("runs the same app on Node with @hono/node-server", async () => {
    const child = spawn(process.execPath, ["node.mjs"], {
      cwd: app,
      env: {
        ...process.env,
        UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
        UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    node = child;
    const base = await new Promise<string>((resolve, reject) => {
      let seen = "";
      child.stdout?.on("data", (chunk) => {
        seen += chunk;
        const match = /listening on (http:\/\/\S+)/.exec(seen);
        if (match?.[1]) resolve(match[1]);
      });
      child.once("exit", (code) => reject(new Error(`node app exited with ${code}`)));
    });
    await expectLimited((path, init) => fetch(`${base}${path}`, init), "node-client");
  }, 60_000);
});
