// Child-process helpers shared by the REST server's redis-server launcher, the local stack (local/start.mjs)
// and the test harness: free ports, children that die with their parent, temporary folders that go with it,
// waiting for a ready line.
import { spawn, spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import { createServer } from "node:net";

/**
 * Asks the OS for a free TCP port on 127.0.0.1. There is a short race between closing the probe socket and
 * the caller binding the port; callers that spawn a server retry on a bind failure.
 * @returns {Promise<number>}
 */
export function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.unref();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      const port = typeof address === "object" && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

/**
 * Whether something already listens on 127.0.0.1:port (a bind attempt fails).
 * @param {number} port
 * @returns {Promise<boolean>}
 */
export function portTaken(port) {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once("error", () => resolve(true));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(false)));
  });
}

// util-linux's setpriv sets PR_SET_PDEATHSIG and then execs the program, so the child keeps its own pid
// (SIGSTOP/SIGCONT reach the real process) and the kernel kills it if this process dies, even by SIGKILL.
const hasSetpriv = spawnSync("sh", ["-c", "command -v setpriv"], { stdio: "ignore" }).status === 0;

/**
 * Spawns a child that is killed with SIGKILL when this process dies (where setpriv exists; otherwise only a
 * clean exit of this process stops it, through the caller's close()).
 * @param {string} command
 * @param {string[]} args
 * @param {import("node:child_process").SpawnOptions} [options]
 * @returns {import("node:child_process").ChildProcess}
 */
export function spawnTied(command, args, options = {}) {
  return hasSetpriv
    ? spawn("setpriv", ["--pdeathsig", "KILL", command, ...args], options)
    : spawn(command, args, options);
}

/**
 * Makes sure a whole process group dies with this process, however this process ends (SIGKILL included):
 * PR_SET_PDEATHSIG only reaches a direct child, not what it spawns (wrangler's workerd). A small detached
 * watchdog reads a pipe from this process; when the pipe closes, it signals the group.
 * @param {number} pgid the group (a child spawned with `detached: true` leads a group with its pid)
 * @param {{ graceMs?: number, removePaths?: string[] }} [options] graceMs: between SIGTERM and SIGKILL;
 *   removePaths: files or folders to delete then too (e.g. a file holding secrets)
 */
export function killGroupWithParent(pgid, { graceMs = 3000, removePaths = [] } = {}) {
  // A Node one-liner rather than sh: dash's kill builtin cannot signal a negative pid (a group).
  const script = `process.stdin.resume().on("close", () => {
    for (const path of ${JSON.stringify(removePaths)}) require("node:fs").rmSync(path, { recursive: true, force: true });
    const send = (sig) => { try { process.kill(-${pgid}, sig); return true; } catch { return false; } };
    if (send("SIGTERM")) setTimeout(() => send("SIGKILL"), ${graceMs});
  });`;
  const watchdog = spawn(process.execPath, ["-e", script], {
    detached: true,
    stdio: ["pipe", "ignore", "ignore"],
  });
  watchdog.unref();
  // The pipe must not keep this process alive; it only has to close when this process is gone.
  /** @type {any} */ (watchdog.stdin)?._handle?.unref?.();
  return watchdog;
}

/** @type {Set<string>} paths removeWithParent deletes when this process ends */
const doomed = new Set();
/** @type {import("node:child_process").ChildProcess | undefined} */
let remover;

/** @param {string} path */
const remove = (path) => rmSync(path, { recursive: true, force: true, maxRetries: 3 });

/**
 * Deletes `path` (a file or a folder) when this process ends, however it ends: at its exit (a signal handler's
 * process.exit() included), and through a small detached watchdog when it is killed outright (SIGKILL, or a
 * signal it does not handle), which no exit hook survives.
 * @param {string} path
 * @returns {() => void} deletes it now and forgets it
 */
export function removeWithParent(path) {
  if (!remover) {
    process.on("exit", () => {
      for (const doomedPath of doomed) remove(doomedPath);
    });
    // One watchdog per process, told each path on its stdin ("+" to delete at the end, "-" to forget it);
    // when the pipe closes this process is gone, and it deletes what is left.
    const script = `const paths = new Set(); let rest = "";
    process.stdin.setEncoding("utf8").on("data", (chunk) => {
      const lines = (rest + chunk).split("\\n"); rest = lines.pop();
      for (const line of lines) { const path = JSON.parse(line.slice(1)); line[0] === "+" ? paths.add(path) : paths.delete(path); }
    }).on("close", () => {
      for (const path of paths) require("node:fs").rmSync(path, { recursive: true, force: true, maxRetries: 3 });
    });`;
    remover = spawn(process.execPath, ["-e", script], {
      detached: true,
      stdio: ["pipe", "ignore", "ignore"],
    });
    remover.on("error", () => {}); // then only the exit hook deletes
    remover.stdin?.on("error", () => {});
    remover.unref();
    // The pipe must not keep this process alive; it only has to close when this process is gone.
    /** @type {any} */ (remover.stdin)?._handle?.unref?.();
  }
  const tell = (/** @type {"+" | "-"} */ op) => remover?.stdin?.write(`${op}${JSON.stringify(path)}\n`);
  doomed.add(path);
  tell("+");
  return () => {
    if (!doomed.delete(path)) return;
    remove(path);
    tell("-");
  };
}

/**
 * Resolves once `pattern` appears in the child's stdout/stderr; rejects if the child exits first or the
 * timeout passes. The rejection carries the output seen so far, which usually names the cause.
 * @param {import("node:child_process").ChildProcess} child
 * @param {RegExp} pattern
 * @param {number} timeoutMs
 * @returns {Promise<RegExpMatchArray>}
 */
export function waitForOutput(child, pattern, timeoutMs) {
  return new Promise((resolve, reject) => {
    let seen = "";
    const streams = [child.stdout, child.stderr].filter((s) => s != null);
    const done = (/** @type {() => void} */ settle) => {
      clearTimeout(timer);
      for (const s of streams) s.off("data", onData);
      child.off("exit", onExit);
      settle();
    };
    const onData = (/** @type {Buffer} */ chunk) => {
      seen += chunk.toString("utf8");
      const match = seen.match(pattern);
      if (match) done(() => resolve(match));
    };
    const onExit = (/** @type {number|null} */ code, /** @type {string|null} */ signal) =>
      done(() => reject(new Error(`process exited (${signal ?? code}) before ${pattern}; output:\n${seen}`)));
    const timer = setTimeout(
      () =>
        done(() =>
          reject(new Error(`timed out after ${timeoutMs} ms waiting for ${pattern}; output:\n${seen}`)),
        ),
      timeoutMs,
    );
    for (const s of streams) s.on("data", onData);
    child.on("exit", onExit);
  });
}

/**
 * Sends `signal`, then SIGKILL after `graceMs` if the child is still alive; resolves when it has exited.
 * With `group: true` the whole process group is signalled (the child must have been spawned detached).
 * @param {import("node:child_process").ChildProcess} child
 * @param {{ signal?: NodeJS.Signals, graceMs?: number, group?: boolean }} [options]
 * @returns {Promise<void>}
 */
export function stopChild(child, { signal = "SIGTERM", graceMs = 3000, group = false } = {}) {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined)
    return Promise.resolve();
  const pid = /** @type {number} */ (child.pid);
  const send = (/** @type {NodeJS.Signals} */ sig) => {
    try {
      process.kill(group ? -pid : pid, sig);
    } catch {
      // Already gone.
    }
  };
  return new Promise((resolve) => {
    const timer = setTimeout(() => send("SIGKILL"), graceMs);
    child.once("exit", () => {
      clearTimeout(timer);
      // A group leader's exit does not end its children; make sure none outlive it.
      if (group) send("SIGKILL");
      resolve();
    });
    // A stopped process cannot act on SIGTERM until it is continued.
    send("SIGCONT");
    send(signal);
  });
}
