/**
 * The load generator: wrk (Debian's package, installed here when missing, as scripts/setup.mjs does for
 * redis-server), run for a bounded time against loopback, with the CPU of the processes under test read
 * from /proc over the same interval.
 */
import { spawn, spawnSync } from "node:child_process";
import { ensureDebianCommand } from "../../scripts/debian-package.mjs";
import { cpuSeconds, pinned } from "./procs.mjs";

/** Makes sure `wrk` is on PATH; installs Debian's package when running as root, otherwise explains. */
export function ensureWrk() {
  ensureDebianCommand("wrk");
}

/** wrk's version line, for the results table. */
export function wrkVersion() {
  const out = spawnSync("wrk", ["--version"], { encoding: "utf8" });
  return (out.stdout || out.stderr).split("\n")[0].trim();
}

const toMs = (value, unit) => Number(value) * { us: 0.001, ms: 1, s: 1000, m: 60_000 }[unit];

/** Parses wrk's `--latency` report. */
export function parseWrk(text) {
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]);
  const latency = (pct) => {
    const match = new RegExp(`^\\s+${pct}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, "m").exec(text);
    return match ? toMs(match[1], match[2]) : Number.NaN;
  };
  const requests = Number(/(\d+) requests in/.exec(text)?.[1]);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(text)?.[1] ?? 0);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(text);
  const socketErrors = socket ? socket.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0;
  return { rps, p50Ms: latency(50), p99Ms: latency(99), requests, non2xx, socketErrors };
}

/**
 * Runs wrk for `durationS` seconds and returns its numbers plus, for each named pid, the CPU it used in
 * microseconds per completed request and as a percentage of one core.
 */
export async function runWrk(
  url,
  { durationS, connections = 32, threads = 2, headers = {}, pids = {}, script },
) {
  const args = [`-t${threads}`, `-c${connections}`, `-d${durationS}s`, "--latency"];
  if (script) args.push("-s", script); // a wrk Lua script (e.g. a new identity per request)
  for (const [name, value] of Object.entries(headers)) args.push("-H", `${name}: ${value}`);
  args.push(url);
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuSeconds(pid)]));
  const startedAt = process.hrtime.bigint();
  const text = await new Promise((resolve, reject) => {
    const child = spawn(...pinned("support", "wrk", args), { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (chunk) => {
      out += chunk;
    });
    child.stderr.on("data", (chunk) => {
      out += chunk;
    });
    child.on("error", reject);
    child.on("exit", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`wrk exited ${code}:\n${out}`)),
    );
  });
  const elapsedS = Number(process.hrtime.bigint() - startedAt) / 1e9;
  const result = parseWrk(text);
  const cpu = {};
  for (const [name, pid] of Object.entries(pids)) {
    const used = (cpuSeconds(pid) ?? Number.NaN) - before[name];
    cpu[name] = { percent: (100 * used) / elapsedS, usPerRequest: (used * 1e6) / result.requests };
  }
  return { ...result, cpu };
}
