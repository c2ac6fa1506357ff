// Runs the real, bundled Worker in Miniflare (workerd) from a Node test, with bindings pointing at the
// test's own redis-server / REST server / origin, and captures everything the Worker logs, so tests can
// assert on log lines (and that no secret is ever in them).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { convertV4MiniflareOptions, Miniflare } from "miniflare";
import { parse } from "smol-toml";
import { bundleWorker } from "../../scripts/bundle-worker.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const wrangler = parse(readFileSync(`${root}wrangler.toml`, "utf8"));

/** @type {Promise<{ path: string, code: string }> | undefined} */
let bundled;

/**
 * Starts the Worker. Bindings are text (non-strings are JSON-encoded, as a secret string would be).
 * @param {{ bindings: Record<string, unknown>, entry?: string, port?: number }} options port: also serve
 *   real HTTP on 127.0.0.1:<port> (for a browser); `url` is then its address
 * @returns {Promise<{
 *   fetch: (path: string, init?: RequestInit) => Promise<Response>,
 *   logs: string[],
 *   url: string,
 *   dispose: () => Promise<void>,
 * }>} fetch: a request to the Worker (path relative to http://floodgate.test); logs: every line it logged
 */
export async function startWorker({ bindings, entry, port }) {
  bundled ??= bundleWorker(entry === undefined ? {} : { entry });
  const { code } = await bundled;
  /** @type {string[]} */
  const logs = [];
  const text = Object.fromEntries(
    Object.entries(bindings).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)]),
  );
  // Miniflare 5 takes a new options shape; the converter accepts the familiar (v4) one.
  const options = convertV4MiniflareOptions({
    name: "floodgate",
    modules: [{ type: "ESModule", path: "worker.mjs", contents: code }],
    compatibilityDate: String(wrangler.compatibility_date),
    compatibilityFlags: /** @type {string[]} */ (wrangler.compatibility_flags ?? []),
    bindings: text,
    handleStructuredLogs: (log) => {
      logs.push(String(log.message));
    },
    ...(port === undefined ? {} : { host: "127.0.0.1", port }),
  });
  const mf = new Miniflare(options);
  const url = (await mf.ready).origin;
  return {
    logs,
    url,
    fetch: async (path, init) =>
      /** @type {Response} */ (
        /** @type {unknown} */ (
          await mf.dispatchFetch(`http://floodgate.test${path}`, /** @type {any} */ (init))
        )
      ),
    dispose: () => mf.dispose(),
  };
}
