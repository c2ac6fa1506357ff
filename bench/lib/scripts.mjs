// Floodgate's Lua scripts as the Worker assembles them (src/engine/scripts.ts, from the sources in lua/),
// for benchmarks that talk to redis-server directly: bundled once with esbuild (`*.lua` as text, as wrangler
// does) and imported from memory.
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { stripKeyLocking } from "../../redis-rest/index.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));

/**
 * Every script by its name (`decide`, `decide-with-options`, `lease`, `refund`, …): its text as Redis runs
 * it, Upstash's key-locking flag stripped for stock Redis (the local REST server does the same).
 * @returns {Promise<Record<string, string>>}
 */
export async function floodgateScripts() {
  const out = await build({
    entryPoints: [`${root}src/engine/scripts.ts`],
    bundle: true,
    write: false,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    loader: { ".lua": "text" },
    logLevel: "silent",
  });
  const code = out.outputFiles[0]?.text ?? "";
  const module = await import(`data:text/javascript;base64,${Buffer.from(code).toString("base64")}`);
  const scripts = {};
  for (const script of module.SCRIPTS) {
    const stripped = stripKeyLocking(script.source);
    if (!stripped) throw new Error(`lua/${script.name}.lua lost its allow-key-locking shebang`);
    scripts[script.name] = stripped;
  }
  return scripts;
}
