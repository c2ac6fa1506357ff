import { readFile } from "node:fs/promises";
import type { Plugin } from "esbuild";
import { defineConfig } from "tsup";
import { stripLua } from "./src/engine/lua-text";

/**
 * Each Lua source inlined without its comments (src/engine/lua-text.ts): half the Lua's bytes. The package's
 * scripts only assemble them (FLOODGATE_LUA_STRIPPED below), which gives the text the Worker strips out of what
 * it assembles, so the package sends the same text and SHA as the Worker does (test/node/lua-text.test.ts).
 */
const luaStripped: Plugin = {
  name: "lua-stripped",
  setup(build) {
    build.onLoad({ filter: /\.lua$/ }, async ({ path }) => ({
      contents: stripLua(await readFile(path, "utf8")),
      loader: "text",
    }));
  },
};

/**
 * The published package (`npm pack` / `npm publish` run this through `prepack`): ESM + `.d.ts` of the
 * library entry (src/index.ts) in dist/, with the sources in lua/ inlined as strings (comments stripped), so a
 * consumer's bundler (wrangler, esbuild, Node) needs no loader rule for `.lua`.
 */
export default defineConfig({
  // `hono-floodgate/jwt` (src/jwt.ts) apart: only an app that verifies tokens imports it, and bundles jose.
  entry: { index: "src/index.ts", jwt: "src/jwt.ts" },
  format: ["esm"],
  target: "es2022",
  platform: "neutral",
  outDir: "dist",
  clean: true,
  dts: { compilerOptions: { types: ["@cloudflare/workers-types"] } },
  sourcemap: false,
  // What both entries use (JwksUnavailableError, which the main entry tells apart by class) lives once.
  splitting: true,
  treeshake: true,
  // Dependencies stay imports; hono is the consumer's own (a peer dependency).
  external: ["hono", "jose", "structured-headers", "valibot"],
  esbuildPlugins: [luaStripped],
  // The scripts are assembled from the stripped sources without stripping again (src/engine/scripts.ts).
  define: { FLOODGATE_LUA_STRIPPED: "true" },
});
