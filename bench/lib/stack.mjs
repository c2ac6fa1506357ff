/**
 * The real parts every benchmark runs against, each its own process so its CPU can be read from /proc:
 * an ephemeral redis-server, the project's Upstash-compatible REST server (redis-rest/, through its CLI as
 * docs/development.md, "Running it locally", defines it), and a Node origin that answers `200 ok`.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { freePort, startProcess } from "./procs.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const restCli = process.env.FLOODGATE_BENCH_REST_CLI ?? `${root}redis-rest/cli.mjs`;

/** redis-server with nothing on disk. */
export async function startRedis() {
  const port = await freePort();
  const proc = await startProcess(
    "redis-server",
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--logfile", ""],
    { ready: /Ready to accept connections/ },
  );
  return { ...proc, port, url: `redis://127.0.0.1:${port}` };
}

/**
 * The local Upstash-compatible REST server in front of `redisUrl`, with a fresh random token; `rttMs` puts
 * a network round trip in front of it (`--rtt`, a database in another region).
 */
export async function startRest(redisUrl, { rttMs = 0 } = {}) {
  if (!existsSync(restCli)) throw new Error(`the REST server's CLI is missing: ${restCli}`);
  const port = await freePort();
  const token = randomBytes(16).toString("hex");
  const proc = await startProcess(
    "redis-rest",
    process.execPath,
    [
      restCli,
      ...["--port", String(port), "--token", token, "--redis", redisUrl],
      ...(rttMs > 0 ? ["--rtt", String(rttMs)] : []),
    ],
    { ready: /listening on http:\/\/127\.0\.0\.1:\d+/ },
  );
  return { ...proc, port, token, url: `http://127.0.0.1:${port}` };
}

/** The origin (bench/lib/origin.mjs). */
export async function startOrigin() {
  const port = await freePort();
  const proc = await startProcess(
    "origin",
    process.execPath,
    [fileURLToPath(new URL("origin.mjs", import.meta.url)), String(port)],
    {
      ready: /origin listening/,
    },
  );
  return { ...proc, port, url: `http://127.0.0.1:${port}` };
}

/** Sends one command to the REST server the way a Worker does (`POST /`, JSON array). */
export async function restCommand(rest, command) {
  const response = await fetch(rest.url, {
    method: "POST",
    headers: { authorization: `Bearer ${rest.token}`, "content-type": "application/json" },
    body: JSON.stringify(command),
  });
  const body = await response.json();
  if (body.error) throw new Error(`${command[0]}: ${body.error}`);
  return body.result;
}

/** Calls per command name since the server started (INFO commandstats: it counts commands run inside scripts). */
export async function commandCounts(rest) {
  const info = String(await restCommand(rest, ["INFO", "commandstats"]));
  const counts = {};
  for (const match of info.matchAll(/^cmdstat_([a-z|_-]+):calls=(\d+)/gm))
    counts[match[1]] = Number(match[2]);
  return counts;
}

/** `after - before`, per command, without the bench's own INFO call and zeros. */
export function commandsSince(after, before) {
  const diff = {};
  for (const [name, calls] of Object.entries(after)) {
    const d = calls - (before[name] ?? 0) - (name === "info" ? 1 : 0);
    if (d > 0) diff[name] = d;
  }
  return diff;
}
