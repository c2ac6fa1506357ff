// Starts a throwaway redis-server child: loopback only, nothing persisted, and controllable the way the
// failure tests need (kill it, freeze it with SIGSTOP, restart it on the same port).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, removeWithParent, spawnTied, stopChild, waitForOutput } from "./processes.mjs";

const READY = /Ready to accept connections/;
const BIND_FAILED = /Could not create server TCP listening socket|Address already in use/;
const startTimeoutMs = 10_000;

/**
 * @typedef {object} RedisHandle
 * @property {string} url `redis://127.0.0.1:<port>`
 * @property {number} port
 * @property {() => number | undefined} pid the current redis-server's pid (changes on restart)
 * @property {() => Promise<void>} kill SIGKILL, as a crash would; the port stays reserved for restart()
 * @property {() => void} stop SIGSTOP: the socket stays open but nothing answers
 * @property {() => void} cont SIGCONT after stop()
 * @property {() => Promise<void>} restart a fresh, empty redis-server on the same port
 * @property {() => Promise<void>} close stop it for good and delete its working directory
 */

/**
 * Spawns `redis-server` on 127.0.0.1 with no persistence (`--save "" --appendonly no`, working directory in a
 * temporary folder removed on close, or when this process ends without close). The child is killed if this
 * process dies.
 * @param {{ port?: number, bin?: string, args?: string[] | (() => Promise<string[]>) }} [options] port: fixed
 *   port (default: one the OS picks); bin: the executable (default `redis-server` on PATH); args: extra
 *   redis-server arguments, or a function giving them, asked again whenever a bind failure makes us pick another
 *   port (a cluster node's bus port is a second port that can be taken the same way)
 * @returns {Promise<RedisHandle>}
 */
export async function startRedis({ port, bin = "redis-server", args = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "floodgate-redis-"));
  const removeDir = removeWithParent(dir);
  let chosen = port ?? (await freePort());
  const argsNow = () => (typeof args === "function" ? args() : Promise.resolve(args));
  let extra = await argsNow();
  /** @type {import("node:child_process").ChildProcess | undefined} */
  let child;

  const launch = async () => {
    const argv = [
      "--port",
      String(chosen),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
      "--daemonize",
      "no",
      "--loglevel",
      "notice",
      ...extra,
    ];
    const next = spawnTied(bin, argv, { stdio: ["ignore", "pipe", "pipe"] });
    next.on("error", () => {}); // reported through waitForOutput's exit/timeout
    child = next;
    try {
      await waitForOutput(next, READY, startTimeoutMs);
    } catch (error) {
      await stopChild(next, { signal: "SIGKILL" });
      throw error;
    }
    // Keep draining its output so a chatty server never blocks on a full pipe.
    next.stdout?.resume();
    next.stderr?.resume();
  };

  // A free port can be taken between probing and binding; pick another unless the caller fixed it.
  for (let attempt = 1; ; attempt++) {
    try {
      await launch();
      break;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      if (port !== undefined || attempt >= 5 || !BIND_FAILED.test(message)) {
        removeDir();
        throw new Error(`redis-server did not start: ${message}`);
      }
      chosen = await freePort();
      extra = await argsNow();
    }
  }

  const signal = (/** @type {NodeJS.Signals} */ sig) => {
    if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null)
      process.kill(child.pid, sig);
  };
  return {
    url: `redis://127.0.0.1:${chosen}`,
    port: chosen,
    pid: () => child?.pid,
    kill: async () => {
      if (child) await stopChild(child, { signal: "SIGKILL" });
    },
    stop: () => signal("SIGSTOP"),
    cont: () => signal("SIGCONT"),
    restart: async () => {
      if (child) await stopChild(child, { signal: "SIGKILL" });
      await launch();
    },
    close: async () => {
      if (child) await stopChild(child, { signal: "SIGTERM", graceMs: 2000 });
      removeDir();
    },
  };
}
