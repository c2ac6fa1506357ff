/**
 * Runs a Worker the way production does: bundled with esbuild (Lua as text, as wrangler's Text rule does),
 * then `workerd serve` with a generated capnp config. Not `wrangler dev`, whose dev stack costs ~7× the CPU
 * per request (bench/README.md, "How it runs").
 *
 * The binary is the npm `workerd` package (node_modules/workerd, 2026-11-02), the one the baseline used;
 * FLOODGATE_BENCH_WORKERD picks another (e.g. wrangler's bundled 2026-11-17 copy).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "smol-toml";
import { bundleWorker } from "../../scripts/bundle-worker.mjs";
import { freePort, httpAnswers, startProcess } from "./procs.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
export const workerdBinary = process.env.FLOODGATE_BENCH_WORKERD ?? `${root}node_modules/workerd/bin/workerd`;

const wrangler = parse(readFileSync(`${root}wrangler.toml`, "utf8"));
const scratch = mkdtempSync(join(tmpdir(), "floodgate-bench-"));
process.once("exit", () => rmSync(scratch, { recursive: true, force: true }));

/** Bundles `entry` (path relative to the repo) into one ES module; cached per entry for this run. */
const bundles = new Map();
export async function bundle(entry) {
  if (!bundles.has(entry)) {
    const outdir = join(scratch, entry.replace(/[^A-Za-z0-9]+/g, "_"));
    mkdirSync(outdir, { recursive: true });
    bundles.set(
      entry,
      bundleWorker({ entry, outdir }).then(({ path }) => path),
    );
  }
  return bundles.get(entry);
}

/** A capnp string literal (JSON's escapes are a subset capnp accepts). */
const capnpString = (value) => JSON.stringify(String(value));

/**
 * The capnp config: one Worker on one socket; outbound fetches may reach loopback (explicit network).
 * `v8Flags`: V8's own flags for the process (e.g. `--trace-deopt`), none by default.
 */
function config({ modulePath, port, bindings, v8Flags }) {
  const flags = (wrangler.compatibility_flags ?? []).map(capnpString).join(", ");
  const bindingList = Object.entries(bindings)
    .map(([name, value]) => `(name = ${capnpString(name)}, text = ${capnpString(value)})`)
    .join(",\n      ");
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = (
      modules = [(name = "worker.js", esModule = embed ${capnpString(modulePath)})],
      compatibilityDate = ${capnpString(wrangler.compatibility_date)},
      compatibilityFlags = [${flags}],
      bindings = [
      ${bindingList}
      ],
    )),
    # The default "internet" service allows only public addresses; the origin and Redis are on 127.0.0.1.
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  v8Flags = [${v8Flags.map(capnpString).join(", ")}],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "main")],
);
`;
}

/**
 * Starts `workerd serve` for one Worker. `bindings` are text bindings (objects are passed as JSON, the
 * way `RATE_LIMIT_RULES` may arrive as a secret string); `extraArgs` go to `workerd serve` (e.g. an
 * inspector address); `v8Flags` to V8, whose trace lines then reach `onOutput` as they are printed.
 * Resolves once the socket answers HTTP.
 */
export async function startWorker(name, entry, bindings, extraArgs = [], { v8Flags = [], onOutput } = {}) {
  const modulePath = await bundle(entry);
  const port = await freePort();
  const dir = join(scratch, name);
  mkdirSync(dir, { recursive: true });
  const text = Object.fromEntries(
    Object.entries(bindings).map(([key, value]) => [
      key,
      typeof value === "string" ? value : JSON.stringify(value),
    ]),
  );
  const configPath = join(dir, "workerd.capnp");
  // capnp resolves `embed` relative to the config file.
  writeFileSync(configPath, config({ modulePath: relative(dir, modulePath), port, bindings: text, v8Flags }));
  const url = `http://127.0.0.1:${port}`;
  // V8 prints its traces on stdout, which a pipe buffers in blocks: line-buffered, they arrive as they happen.
  const [command, args] = onOutput
    ? ["stdbuf", ["-oL", workerdBinary, "serve", configPath, ...extraArgs]]
    : [workerdBinary, ["serve", configPath, ...extraArgs]];
  const proc = await startProcess(name, command, args, {
    ready: httpAnswers(`${url}/__floodgate/health`),
    role: "workerd",
    onOutput,
  });
  return { ...proc, port, url };
}
