#!/usr/bin/env node
// `npm start`: the whole stack on this machine (docs/development.md, "Running it locally"). An ephemeral
// redis-server and the local Upstash-compatible REST server (unless UPSTASH_REDIS_REST_URL/_TOKEN are given), a demo origin (unless
// ORIGIN_URL is given) and the Worker in `wrangler dev` on 127.0.0.1:PORT. stdout carries only the ready
// line and a curl loop to try; everything else goes to stderr. SIGINT/SIGTERM/SIGHUP stop every process
// started; a failure to start stops them too and exits 1 with a message.
// `npm start -- --cluster` (or FLOODGATE_REDIS=cluster) runs a real 3-master Redis Cluster (one replica
// each) behind the REST server instead of a single redis-server; `--databases` (FLOODGATE_REDIS=databases)
// three independent redis-servers, each behind its own REST server, listed in UPSTASH_REDIS_REST_URL.
// `npm start -- --regions [--primary-rtt <ms>]` (docs/regions.md): a primary and two regions (eu, us), each
// its own redis-server and REST server, the primary's behind an added round trip (default 80 ms).
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  freePort,
  killGroupWithParent,
  portTaken,
  removeWithParent,
  spawnTied,
  startRedis,
  startRedisCluster,
  startRedisServers,
  startRestServer,
  stopChild,
} from "../redis-rest/index.mjs";
import { startDemoOrigin } from "./demo-origin.mjs";
import { formatEnvFile, mergeBindings } from "./env-file.mjs";
import { waitUntilServing } from "./ready.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const readyTimeoutMs = 90_000;
const log = (/** @type {string} */ message) => console.error(`[floodgate] ${message}`);

/** @type {Array<() => Promise<void> | void>} run in reverse order on the way out */
const cleanups = [];
let exiting = false;
/** @param {number} code */
async function shutdown(code) {
  if (exiting) return;
  exiting = true;
  for (const cleanup of cleanups.reverse()) {
    try {
      await cleanup();
    } catch (error) {
      log(`while stopping: ${error instanceof Error ? error.message : error}`);
    }
  }
  process.exit(code);
}
// Handlers before anything starts: a signal during startup (a cluster takes seconds) stops what has started;
// the redis-servers' folders and the env file go at exit, or with their watchdog if this process is killed.
// SIGHUP too: a closed terminal must not leave the stack behind.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(signal, () => shutdown(0));
// Whoever started the stack going away stops it too: npm may exit on SIGINT/SIGTERM without passing the
// signal on. Under `npm start` the script's `exec` makes npm this process's parent; were it run through npm's
// `sh -c` without `exec`, that shell would outlive npm, so npm (its parent) is watched too. Nothing above npm
// is: `nohup npm start &` keeps running after the shell that started it logs out.
const parentPid = process.ppid;
const npmPid = isNpmScriptShell(parentPid) ? parentOf(parentPid) : undefined;
setInterval(() => {
  if (process.ppid !== parentPid || (npmPid !== undefined && !running(npmPid))) shutdown(0);
}, 500).unref();

/** @param {string} message */
function fail(message) {
  log(message);
  return shutdown(1);
}

/**
 * One startup step: a failure is reported and stops the stack (exit 1); once a shutdown has begun (Ctrl-C
 * during the step), startup goes no further and the shutdown ends the process.
 * @template T
 * @param {string} what
 * @param {() => Promise<T>} run
 * @returns {Promise<T>}
 */
async function step(what, run) {
  try {
    const value = await run();
    if (!exiting) return value;
  } catch (error) {
    await fail(`cannot start ${what}: ${error instanceof Error ? error.message : error}`);
  }
  return new Promise(() => {}); // shutdown() ends the process
}

const port = Number(process.env.PORT ?? 8787);
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  await fail(`PORT must be a TCP port number, got ${JSON.stringify(process.env.PORT)}`);
}
if (await portTaken(port)) {
  await fail(
    `127.0.0.1:${port} is already in use. Stop what listens there, or choose another port: PORT=8788 npm start`,
  );
}

const { vars, from } = mergeBindings(join(root, ".dev.vars"), process.env);
const redisMode = process.argv.includes("--cluster")
  ? "cluster"
  : process.argv.includes("--databases")
    ? "databases"
    : process.argv.includes("--regions")
      ? "regions"
      : (process.env.FLOODGATE_REDIS ?? "single");
if (!["single", "cluster", "databases", "regions"].includes(redisMode)) {
  await fail(
    `FLOODGATE_REDIS must be single, cluster, databases or regions, got ${JSON.stringify(redisMode)}`,
  );
}
const args = process.argv.slice(2);
const rttAt = args.indexOf("--primary-rtt");
const primaryRttMs = rttAt < 0 ? 80 : Number(args[rttAt + 1]);
if (rttAt >= 0 && (redisMode !== "regions" || !Number.isInteger(primaryRttMs) || primaryRttMs < 0)) {
  await fail(
    "--primary-rtt takes a whole number of ms, with --regions: npm start -- --regions --primary-rtt 150",
  );
}
const unknownArgs = args.filter(
  (arg, i) =>
    !["--cluster", "--databases", "--regions"].includes(arg) &&
    !(rttAt >= 0 && (i === rttAt || i === rttAt + 1)),
);
if (unknownArgs.length > 0) {
  await fail(
    `unknown option ${unknownArgs[0]}; usage: npm start [-- --cluster | --databases | --regions [--primary-rtt <ms>]]`,
  );
}

if (vars.UPSTASH_REDIS_REST_URL && vars.UPSTASH_REDIS_REST_TOKEN) {
  log(`using the Redis REST endpoint ${vars.UPSTASH_REDIS_REST_URL} (from ${from.UPSTASH_REDIS_REST_URL})`);
} else if (redisMode === "cluster") {
  const cluster = await step("a Redis Cluster", () => startRedisCluster());
  cleanups.push(() => cluster.close());
  const rest = await step("the REST server", () =>
    startRestServer({ redisUrl: cluster.urls.join(","), cluster: true }),
  );
  cleanups.push(() => rest.close());
  vars.UPSTASH_REDIS_REST_URL = rest.url;
  vars.UPSTASH_REDIS_REST_TOKEN = rest.token;
  // Keys of different identities live in different hash slots: split such requests (docs/scaling-out.md).
  vars.RATE_LIMIT_REDIS_CLUSTER = "on";
  log(
    `Redis Cluster (ephemeral, 3 masters + 3 replicas) at ${cluster.urls.join(", ")}; REST server at ${rest.url}`,
  );
} else if (redisMode === "databases") {
  // Three independent databases, each behind its own REST server, one token for all (docs/scaling-out.md).
  const servers = await step("redis-server", () => startRedisServers(3));
  cleanups.push(() => Promise.all(servers.map((server) => server.close())));
  const token = randomBytes(16).toString("hex");
  const rests = [];
  for (const server of servers) {
    const rest = await step("a REST server", () => startRestServer({ redisUrl: server.url, token }));
    cleanups.push(() => rest.close());
    rests.push(rest);
  }
  vars.UPSTASH_REDIS_REST_URL = rests.map((rest) => rest.url).join(",");
  vars.UPSTASH_REDIS_REST_TOKEN = token;
  log(`3 redis-servers (ephemeral), each behind a REST server: ${vars.UPSTASH_REDIS_REST_URL}`);
} else if (redisMode === "regions") {
  // A primary and two regions, each its own redis-server behind its own REST server, one token for all; the
  // primary an ocean away (docs/regions.md).
  const servers = await step("redis-server", () => startRedisServers(3));
  cleanups.push(() => Promise.all(servers.map((server) => server.close())));
  const token = randomBytes(16).toString("hex");
  const rests = [];
  for (const [i, server] of servers.entries()) {
    const rest = await step("a REST server", () =>
      startRestServer({ redisUrl: server.url, token, ...(i === 0 && { rttMs: primaryRttMs }) }),
    );
    cleanups.push(() => rest.close());
    rests.push(rest);
  }
  vars.UPSTASH_REDIS_REST_URL = rests[0].url;
  vars.UPSTASH_REDIS_REST_TOKEN = token;
  vars.RATE_LIMIT_REGIONS = JSON.stringify({ eu: ["EU", "AF"], us: ["NA", "SA"] });
  for (const [i, name] of ["EU", "US"].entries()) {
    vars[`UPSTASH_REDIS_REST_URL_${name}`] = rests[i + 1].url;
    vars[`UPSTASH_REDIS_REST_TOKEN_${name}`] = token;
  }
  // One Worker, pinned to one region (RATE_LIMIT_REGION=us for the other): request.cf is a placeholder here.
  vars.RATE_LIMIT_REGION ||= "eu";
  log(
    `primary at ${rests[0].url} (${primaryRttMs} ms round trip added), regions eu at ${rests[1].url} and us at ${rests[2].url}; this Worker decides in ${vars.RATE_LIMIT_REGION}`,
  );
} else {
  const redis = await step("redis-server", () => startRedis());
  cleanups.push(() => redis.close());
  const rest = await step("the REST server", () => startRestServer({ redisUrl: redis.url }));
  cleanups.push(() => rest.close());
  vars.UPSTASH_REDIS_REST_URL = rest.url;
  vars.UPSTASH_REDIS_REST_TOKEN = rest.token;
  log(`redis-server (ephemeral) at ${redis.url}; Upstash-compatible REST server at ${rest.url}`);
}

if (vars.ORIGIN_URL) {
  log(`origin: ${vars.ORIGIN_URL} (from ${from.ORIGIN_URL})`);
} else {
  const origin = await step("the demo origin", () => startDemoOrigin());
  cleanups.push(() => origin.close());
  vars.ORIGIN_URL = origin.url;
  log(`demo origin at ${origin.url}`);
}

// The dashboard (and the admin API) need an admin token: without one, this run makes a random one and
// prints it (it lives as long as this process); one set in .dev.vars or the environment is never printed.
const generatedAdminToken = vars.RATE_LIMIT_ADMIN_TOKEN ? undefined : randomBytes(24).toString("base64url");
if (generatedAdminToken) vars.RATE_LIMIT_ADMIN_TOKEN = generatedAdminToken;

// The bindings reach wrangler in a file only this user can read, deleted on exit: no secret in `ps`.
const envDir = mkdtempSync(join(tmpdir(), "floodgate-env-"));
const envFile = join(envDir, "bindings.env");
cleanups.push(removeWithParent(envDir));
try {
  writeFileSync(envFile, formatEnvFile(vars), { mode: 0o600 });
  chmodSync(envFile, 0o600);
} catch (error) {
  await fail(`cannot write the bindings for wrangler: ${error instanceof Error ? error.message : error}`);
}

const inspectorPort = await step("wrangler dev", () => freePort());
/** @type {NodeJS.ProcessEnv} */
const wranglerEnv = {
  ...process.env,
  WRANGLER_SEND_METRICS: "false",
  // No fetch of Cloudflare's request.cf from the network: Miniflare's placeholder, or the facts of the file
  // CLOUDFLARE_CF_FETCH_PATH names (docs/protect.md, "Setting request.cf locally"), which this would disable.
  ...(process.env.CLOUDFLARE_CF_FETCH_PATH ? {} : { CLOUDFLARE_CF_FETCH_ENABLED: "false" }),
};
// Only the env file may feed bindings; secrets from this environment stay out of wrangler's own env.
delete wranglerEnv.CLOUDFLARE_INCLUDE_PROCESS_ENV;
delete wranglerEnv.CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV;
for (const key of Object.keys(vars)) delete wranglerEnv[key];

// Its own process group, so stopping it also stops the workerd it spawns.
const wrangler = spawnTied(
  process.execPath,
  [
    join(root, "node_modules/wrangler/bin/wrangler.js"),
    "dev",
    "--ip",
    "127.0.0.1",
    "--port",
    String(port),
    "--inspector-port",
    String(inspectorPort),
    "--env-file",
    envFile,
    "--show-interactive-dev-session=false",
  ],
  { cwd: root, env: wranglerEnv, detached: true, stdio: ["ignore", "pipe", "pipe"] },
);
cleanups.push(() => stopChild(wrangler, { signal: "SIGTERM", graceMs: 5000, group: true }));
// Should this process be killed outright, wrangler's workerd must not outlive it either.
if (wrangler.pid !== undefined) killGroupWithParent(wrangler.pid);
// wrangler's own output is noise for this command's stdout: all of it goes to stderr.
wrangler.stdout?.pipe(process.stderr);
wrangler.stderr?.pipe(process.stderr);
wrangler.on("exit", (code, signal) => {
  if (!exiting) fail(`wrangler dev exited (${signal ?? code}); see its output above`);
});

const url = `http://127.0.0.1:${port}`;
try {
  const health = await waitUntilServing(url, readyTimeoutMs, () => exiting);
  if (health) log(health);
} catch (error) {
  await fail(error instanceof Error ? error.message : String(error));
}
if (!exiting) {
  console.log(`Floodgate listening on ${url}`);
  // The example rule is wrangler.toml's; rules given in .dev.vars or the environment replace it.
  log(
    from.RATE_LIMIT_RULES
      ? `try it: the loop below shows how your rules (from ${from.RATE_LIMIT_RULES}) answer`
      : "try it: the loop below shows 200s, then 429 with Retry-After (example rule per-ip: 10 requests per 10 s)",
  );
  console.log(
    `for i in $(seq 12); do curl -s -o /dev/null -w "%{http_code} retry-after=%header{retry-after}\\n" ${url}/; done`,
  );
  log(
    generatedAdminToken
      ? `dashboard: open ${url}/__floodgate/ and sign in with the admin token ${generatedAdminToken} (made for this run; set RATE_LIMIT_ADMIN_TOKEN in .dev.vars to keep one)`
      : `dashboard: open ${url}/__floodgate/ and sign in with RATE_LIMIT_ADMIN_TOKEN (from ${from.RATE_LIMIT_ADMIN_TOKEN})`,
  );
}

/**
 * The parent of a process, from /proc (Linux); undefined elsewhere.
 * @param {number} pid
 */
function parentOf(pid) {
  try {
    return Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ")[1]) || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether `pid` is the shell npm runs a script in (`sh -c '<the script>'`), read from /proc (Linux).
 * @param {number} pid
 */
function isNpmScriptShell(pid) {
  const script = process.env.npm_lifecycle_script;
  if (!script) return false;
  try {
    const [, flag, command] = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    return flag === "-c" && command?.startsWith(script) === true;
  } catch {
    return false;
  }
}

/**
 * Whether a process still runs (a zombie does not).
 * @param {number} pid
 */
function running(pid) {
  try {
    return !readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.startsWith("Z");
  } catch {
    return false;
  }
}
