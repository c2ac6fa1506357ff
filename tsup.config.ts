import { defineConfig } from "tsup";

/**
 * The published package (`npm pack` / `npm publish` run this through `prepack`): ESM + `.d.ts` of the
 * library entry (src/index.ts) in dist/, with the sources in lua/ inlined as strings, so a consumer's
 * bundler (wrangler, esbuild, Node) needs no loader rule for `.lua`.
 */
export default defineConfig({
  entry: { index: "src/index.ts" },
  format: ["esm"],
  target: "es2022",
  platform: "neutral",
  outDir: "dist",
  clean: true,
  dts: { compilerOptions: { types: ["@cloudflare/workers-types"] } },
  sourcemap: false,
  splitting: false,
  treeshake: true,
  // Dependencies stay imports; hono is the consumer's own (a peer dependency).
  external: ["hono", "jose", "structured-headers", "valibot"],
  loader: { ".lua": "text" },
});
