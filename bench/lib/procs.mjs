/**
 * Child-process plumbing for the benchmarks: free ports, spawning with a readiness check, CPU time from
 * /proc, and one place that stops everything this run started (and only that).
 */
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { hasCommand } from "../../scripts/debian-package.mjs";

/** Clock ticks per second for /proc/<pid>/stat utime/stime (Linux: 100 on every mainstream kernel). */
const CLOCK_TICKS_PER_SECOND = 100;

const children = new Set();

const hasTaskset = hasCommand("taskset");
const cpuCount = availableParallelism();

/**
 * Optional CPU pinning (FLOODGATE_BENCH_PIN=1): `workerd` gets the last CPU to itself, everything else
 * (load generator, origin, REST server, Redis) shares the others. Off by default, as in the baseline: on a
 * machine other work is also using, a pinned workerd cannot move away from a busy core, and its numbers
 * got worse, not steadier (measured: 27–40 % of its core instead of 60–90 % unpinned).
 */
export function pinned(role, command, args) {
  if (!hasTaskset || cpuCount < 2 || process.env.FLOODGATE_BENCH_PIN !== "1") return [command, args];
  const cpus = role === "workerd" ? String(cpuCount - 1) : `0-${cpuCount - 2}`;
  return ["taskset", ["-c", cpus, command, ...args]];
}

/** A TCP port on 127.0.0.1 that was free a moment ago (the REST server's helper, shared). */
export { freePort } from "../../redis-rest/processes.mjs";

/**
 * Starts a process and resolves once `ready` says so (a line on stdout/stderr matching a RegExp, or an async
 * probe returning true). Rejects with the process's last output if it exits or `timeoutMs` passes first.
 * `onOutput` sees every chunk of its stdout and stderr.
 */
export async function startProcess(
  name,
  command,
  args,
  { ready, timeoutMs = 20_000, env, cwd, role, onOutput } = {},
) {
  const [file, argv] = pinned(role ?? "support", command, args);
  const child = spawn(file, argv, {
    env: { ...process.env, ...env },
    cwd,
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let output = "";
  let exited = null;
  const onData = (chunk) => {
    output = (output + chunk).slice(-8_000);
    onOutput?.(String(chunk));
  };
  child.stdout.on("data", onData);
  child.stderr.on("data", onData);
  child.on("exit", (code, signal) => {
    exited = { code, signal };
    children.delete(child);
  });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exited) throw new Error(`${name} exited (${exited.code ?? exited.signal}) before ready:\n${output}`);
    if (ready instanceof RegExp ? ready.test(output) : await ready().catch(() => false)) break;
    if (Date.now() > deadline) {
      await stopProcess(child);
      throw new Error(`${name} not ready within ${timeoutMs} ms:\n${output}`);
    }
    await sleep(50);
  }
  return { name, child, pid: child.pid, output: () => output, stop: () => stopProcess(child) };
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves when the process is gone. */
export async function stopProcess(child, graceMs = 2_000) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await gone;
  clearTimeout(timer);
}

/** Stops every process this module started that is still running. */
export async function stopAll() {
  await Promise.all([...children].map((child) => stopProcess(child)));
}

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.once(signal, async () => {
    await stopAll();
    process.exit(130);
  });
}

/** CPU seconds (user + system, all threads) a process has used so far; `null` once it is gone. */
export function cpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the `(comm)`, which may itself contain spaces: utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return null;
  }
}

/** Polls `url` until it answers at all (any status). */
export const httpAnswers = (url) => async () => {
  const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
  await response.arrayBuffer();
  return true;
};
