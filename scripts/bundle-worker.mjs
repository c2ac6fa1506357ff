// Bundles a Worker the way wrangler does for deploy: one ES module, `*.lua` imported as text (wrangler's
// `[[rules]] type = "Text"`), workerd export conditions. Used by the Miniflare-based process tests
// (test/support/miniflare-worker.mjs) and by the benchmarks' `workerd serve` harness (bench/lib/workerd.mjs).
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { removeWithParent } from "../redis-rest/index.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));

/**
 * Bundles `entry` (default `src/worker.ts`) into one ES module file.
 * @param {{ entry?: string, outdir?: string }} [options] entry: path relative to the repository root (or absolute);
 *   outdir: where to write it (default: a fresh temporary directory, removed when this process exits)
 * @returns {Promise<{ path: string, code: string }>} the bundle's path and its text
 */
export async function bundleWorker({ entry = "src/worker.ts", outdir } = {}) {
  let dir = outdir;
  if (dir === undefined) {
    const tmp = mkdtempSync(join(tmpdir(), "floodgate-worker-"));
    // Also when this process is killed rather than exits (a test runner's worker often is).
    removeWithParent(tmp);
    dir = tmp;
  }
  const path = join(dir, "worker.mjs");
  await build({
    entryPoints: [resolve(root, entry)],
    outfile: path,
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    conditions: ["workerd", "worker", "browser"],
    mainFields: ["module", "main"],
    loader: { ".lua": "text" },
    external: ["cloudflare:*", "node:*"],
    logLevel: "silent",
  });
  return { path, code: readFileSync(path, "utf8") };
}
