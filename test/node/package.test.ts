import { type ChildProcess, execFile, spawn } from "node:child_process";
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { gzipSync } from "node:zlib";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { parse as parseToml } from "smol-toml";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, "../..");
const APP_FILES = resolve(import.meta.dirname, "package-app");
const NPM_ENV = { ...process.env, WRANGLER_SEND_METRICS: "false", npm_config_update_notifier: "false" };

/**
 * A copy of the work tree (what git tracks or would, and node_modules' entries linked) to pack in, as a user packs
 * a clone: `npm pack` puts package/README.md in README.md's place while it runs (scripts/package-readme.mjs), and
 * other tests read this tree's README.md meanwhile.
 */
async function workTreeCopy(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "floodgate-clone-"));
  const { stdout } = await run("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z"], {
    cwd: ROOT,
  });
  for (const file of stdout.split("\0").filter(Boolean)) {
    await mkdir(dirname(join(dir, file)), { recursive: true });
    await copyFile(join(ROOT, file), join(dir, file)).catch((error) => {
      if (error.code !== "ENOENT") throw error; // deleted in the work tree, not yet in git
    });
  }
  await mkdir(join(dir, "node_modules"));
  for (const entry of await readdir(join(ROOT, "node_modules"))) {
    if (entry !== ".cache")
      await symlink(join(ROOT, "node_modules", entry), join(dir, "node_modules", entry));
  }
  return dir;
}

/** The files a README shows in full: fenced blocks whose first line is a comment naming the file. */
function filesOf(readme: string): Record<string, string> {
  const files: Record<string, string> = {};
  for (const m of readme.matchAll(/^```\w+\n(?:#|\/\/) ([\w./-]+)\n([\s\S]*?)^```$/gm)) {
    files[m[1] as string] = `${m[0].split("\n")[1]}\n${m[2]}`;
  }
  return files;
}

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

/**
 * The first answer that Redis decided: the README's examples keep the 200 ms default budget, which a loaded test
 * machine may miss (the request then passes undecided, with no RateLimit headers: docs/failure-modes.md).
 */
async function decided(send: () => Promise<Response>): Promise<Response> {
  for (let attempt = 1; ; attempt++) {
    const res = await send();
    if (res.headers.has("RateLimit-Policy") || attempt === 5) return res;
    await res.arrayBuffer();
  }
}

describe("the npm package, installed from its tarball into a fresh Hono app", () => {
  let work: string;
  let clone: string;
  let tarball: string;
  let app: string;
  let node: ChildProcess | undefined;
  let files: string[] = [];

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), "floodgate-pack-"));
    clone = await workTreeCopy();
    // `npm pack` builds dist/ through `prepack`, as `npm publish` does.
    const { stdout } = await run("npm", ["pack", "--json", "--pack-destination", work], {
      cwd: clone,
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
    await Promise.all(
      [work, clone, app].filter(Boolean).map((dir) => rm(dir, { recursive: true, force: true })),
    );
  });

  it("holds only the built library, its licence and change log: no sources, tests, benchmarks or local tooling", async () => {
    // Two entries (`hono-floodgate`, `hono-floodgate/jwt`) and what both use, in a chunk named by its hash.
    expect(files.map((file) => file.replace(/-[\w]{8}\.(js|d\.ts)$/, "-<hash>.$1"))).toEqual([
      "CHANGELOG.md",
      "LICENSE",
      "README.md",
      "dist/chunk-<hash>.js",
      "dist/index.d.ts",
      "dist/index.js",
      "dist/jwt-<hash>.d.ts",
      "dist/jwt.d.ts",
      "dist/jwt.js",
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
    const dist = join(app, "node_modules/hono-floodgate/dist");
    const code = (
      await Promise.all(
        (await readdir(dist)).filter((f) => f.endsWith(".js")).map((f) => readFile(join(dist, f), "utf8")),
      )
    ).join("\n");
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
  it("verifies jwt: keys with joseVerifier from hono-floodgate/jwt, and names the import when it is missing", async () => {
    const script = join(app, "jwt.mjs");
    await writeFile(
      script,
      `import { Hono } from "hono";
import { rateLimit } from "hono-floodgate";
import { joseVerifier } from "hono-floodgate/jwt";
import { SignJWT } from "jose";
const secret = "package-jwt-secret-0123456789";
const redis = { url: process.env.UPSTASH_REDIS_REST_URL, token: process.env.UPSTASH_REDIS_REST_TOKEN };
const rules = [{ name: "per-user", key: "jwt:sub", algorithm: "fixed-window", limit: 2, period: "1m", missing: "deny" }];
const app = new Hono();
app.use("*", rateLimit({ redis, prefix: "pkg-jwt-" + Date.now(), timeoutMs: 5000, jwt: { secret, verifier: joseVerifier }, rules }));
app.get("/", (c) => c.text("ok"));
const token = await new SignJWT({ sub: "alice" }).setProtectedHeader({ alg: "HS256" }).setExpirationTime("5m").sign(new TextEncoder().encode(secret));
const statuses = [];
for (let i = 0; i < 3; i++) statuses.push((await app.request("/", { headers: { authorization: "Bearer " + token } })).status);
statuses.push((await app.request("/", { headers: { authorization: "Bearer " + token.slice(0, -2) + "xx" } })).status);
let error = "";
try { rateLimit({ redis, jwt: { secret }, rules }); } catch (e) { error = e.message; }
process.stdout.write(JSON.stringify({ statuses, error }));
`,
    );
    const { stdout } = await run(process.execPath, [script], {
      cwd: app,
      env: {
        ...process.env,
        UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
        UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
      },
    });
    const { statuses, error } = JSON.parse(stdout);
    // Two for alice, then her 429; a token with a broken signature is no identity (missing = deny: 401).
    expect(statuses).toEqual([200, 200, 429, 401]);
    expect(error).toContain(
      'jwt.verifier: required with jwt.secret or jwt.jwksUrl: import { joseVerifier } from "hono-floodgate/jwt"',
    );
  });

  it("ships its own README, leaves the clone's README.md as it was, and refuses to publish without a repository", async () => {
    const shipped = await readFile(join(app, "node_modules/hono-floodgate/README.md"), "utf8");
    expect(shipped).toBe(await readFile(join(ROOT, "package/README.md"), "utf8"));
    expect(shipped).toMatch(/^# hono-floodgate\n/);
    // postpack put the repository's page back.
    expect(await readFile(join(clone, "README.md"), "utf8")).toBe(
      await readFile(join(ROOT, "README.md"), "utf8"),
    );
    // Until package.json names the public repository (homepage, bugs), `npm publish` stops in prepublishOnly.
    const publish = run(process.execPath, ["scripts/check-publish.mjs"], { cwd: clone });
    await expect(publish).rejects.toMatchObject({
      code: 1,
      stderr: expect.stringContaining("no repository, homepage, bugs"),
    });
  });

  // The goal (a bare Hono app is 21 KiB / 9 KiB minified): jose out of the main entry (hono-floodgate/jwt) and
  // the inlined Lua without comments or indentation, and `keep_names = false` beside `minify = true` in its
  // wrangler.toml (no `__name` call per function) keep the example at about 168 KiB / 56 KiB
  // (package/README.md, "Bundle size").
  const MAX_BUNDLE = 200 * 1024;
  const MAX_BUNDLE_GZIP = 60 * 1024;

  it("builds the README's Workers example as written with wrangler, small enough, and Redis decides its requests on workerd", async () => {
    const example = filesOf(await readFile(join(app, "node_modules/hono-floodgate/README.md"), "utf8"));
    expect(Object.keys(example)).toEqual(["wrangler.toml", "src/index.ts", "server.mjs"]);
    const dir = join(app, "readme-worker");
    for (const file of ["wrangler.toml", "src/index.ts"]) {
      await mkdir(dirname(join(dir, file)), { recursive: true });
      await writeFile(join(dir, file), example[file] as string);
    }
    const out = join(dir, "out");
    await run(
      join(app, "node_modules/.bin/wrangler"),
      ["deploy", "--dry-run", "--outdir", out, "--metafile"],
      {
        cwd: dir,
        env: NPM_ENV,
      },
    );
    const code = await readFile(join(out, "index.js"));
    const gzipped = gzipSync(code).length;
    // What fills the bundle, by package, when it is too big.
    const meta = JSON.parse(await readFile(join(out, "bundle-meta.json"), "utf8"));
    const inputs = Object.entries(meta.outputs).find(([name]) => name.endsWith(".js"))?.[1] as {
      inputs: Record<string, { bytesInOutput: number }>;
    };
    const byPackage: Record<string, number> = {};
    for (const [path, { bytesInOutput }] of Object.entries(inputs.inputs)) {
      const name = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path)?.[1] ?? path;
      byPackage[name] = (byPackage[name] ?? 0) + bytesInOutput;
    }
    const sizes = `${code.length} bytes, ${gzipped} gzipped: ${JSON.stringify(byPackage)}`;
    // An app without jwt: keys never imports hono-floodgate/jwt, so none of jose is in its bundle.
    expect(byPackage, sizes).not.toHaveProperty("jose");
    expect(code.length, sizes).toBeLessThanOrEqual(MAX_BUNDLE);
    expect(gzipped, sizes).toBeLessThanOrEqual(MAX_BUNDLE_GZIP);

    const toml = parseToml(example["wrangler.toml"] as string) as { compatibility_date: string };
    // The README's date, and the oldest it promises.
    for (const compatibilityDate of [toml.compatibility_date, "2024-01-01"]) {
      const mf = new Miniflare(
        convertV4MiniflareOptions({
          modules: [{ type: "ESModule", path: "index.js", contents: code.toString("utf8") }],
          compatibilityDate,
          bindings: {
            UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
            UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
          },
        }),
      );
      try {
        const ip = `2001:db8::${crypto.randomUUID().slice(0, 4)}`;
        const hello = () =>
          mf.dispatchFetch("http://app.test/api/hello", { headers: { "CF-Connecting-IP": ip } });
        const res = await decided(hello);
        expect(res.status, compatibilityDate).toBe(200);
        expect(res.headers.get("RateLimit-Policy")).toBe('"per-ip";q=100;w=60');
        const body = (await res.json()) as { hello: string; remaining: number };
        expect(body.hello).toBe("world");
        expect(res.headers.get("RateLimit")).toMatch(new RegExp(`^"per-ip";r=${body.remaining};t=\\d+$`));
        expect(body.remaining).toBeLessThanOrEqual(99);
      } finally {
        await mf.dispose();
      }
    }
  }, 120_000);

  it("runs the README's Node example as written with node", async () => {
    const example = filesOf(await readFile(join(app, "node_modules/hono-floodgate/README.md"), "utf8"));
    await writeFile(join(app, "server.mjs"), example["server.mjs"] as string);
    const child = spawn(process.execPath, ["server.mjs"], {
      cwd: app,
      env: {
        ...process.env,
        PORT: "0",
        UPSTASH_REDIS_REST_URL: inject("redisRestUrl"),
        UPSTASH_REDIS_REST_TOKEN: inject("redisRestToken"),
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    try {
      const base = await new Promise<string>((resolve, reject) => {
        let seen = "";
        child.stdout?.on("data", (chunk) => {
          seen += chunk;
          const match = /listening on (http:\/\/\S+)/.exec(seen);
          if (match?.[1]) resolve(match[1]);
        });
        child.once("exit", (code) => reject(new Error(`server.mjs exited with ${code}`)));
      });
      const res = await decided(() => fetch(`${base}/api/hello`));
      expect(res.status).toBe(200);
      expect(res.headers.get("RateLimit-Policy")).toBe('"per-ip";q=100;w=60');
      expect(((await res.json()) as { hello: string }).hello).toBe("world");
    } finally {
      child.kill();
    }
  }, 60_000);
});
