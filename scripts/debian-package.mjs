// Installing a missing command from Debian's packages: the one way this machine kind gets binaries npm cannot
// bring (redis-server for the tests and npm start, prometheus and promtool for the monitoring tests, wrk for the
// benchmarks).
import { execFileSync, spawnSync } from "node:child_process";

/** Whether `command` is on PATH. */
export const hasCommand = (command) =>
  spawnSync("sh", ["-c", `command -v ${command}`], { stdio: "ignore" }).status === 0;

/**
 * Makes sure `command` is on PATH, installing Debian's `pkg` when running as root with apt; otherwise throws
 * an Error whose message is the one line to run.
 * @param {string} command
 * @param {string} [pkg] the Debian package providing it (default: the command's name)
 * @returns {boolean} true if it had to be installed
 */
export function ensureDebianCommand(command, pkg = command) {
  if (hasCommand(command)) return false;
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (!isRoot || !hasCommand("apt-get")) {
    throw new Error(`${command} is missing. Install it with: sudo apt-get install -y ${pkg}`);
  }
  console.error(`${command} is missing; installing Debian's ${pkg} (one time)…`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  execFileSync("apt-get", ["update", "-qq"], { stdio: ["ignore", "ignore", "inherit"], env });
  execFileSync("apt-get", ["install", "-y", "-qq", "--no-install-recommends", pkg], {
    stdio: ["ignore", "ignore", "inherit"],
    env,
  });
  return true;
}

/**
 * Makes sure redis-server and redis-cli (which creates the local Redis Cluster) are on PATH, installing Debian's
 * packages on first use. Debian starts a system-wide instance on 6379 after installing it; Floodgate never uses
 * it (it starts its own), so it is stopped.
 */
export function ensureRedis() {
  if (ensureDebianCommand("redis-server")) {
    spawnSync("sh", ["-c", "service redis-server stop || systemctl stop redis-server"], { stdio: "ignore" });
  }
  // Debian's redis-server depends on redis-tools, but a redis-server from elsewhere may come without it.
  ensureDebianCommand("redis-cli", "redis-tools");
}

/**
 * Makes sure prometheus and promtool (Debian's `prometheus` package brings both) are on PATH, for the test that
 * scrapes a running Floodgate and checks monitoring/ (docs/monitoring.md). Debian may start a system-wide
 * instance on 9090 after installing it; the tests start their own, so it is stopped.
 */
export function ensurePrometheus() {
  if (ensureDebianCommand("prometheus")) {
    spawnSync("sh", ["-c", "service prometheus stop || systemctl stop prometheus"], { stdio: "ignore" });
  }
  ensureDebianCommand("promtool", "prometheus");
}
