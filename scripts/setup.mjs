#!/usr/bin/env node
// Brings what this machine lacks and npm cannot: a redis-server binary (Debian's package).
// Node 22 itself arrives with `npm install` (the `node` devDependency puts it first on npm scripts' PATH).
import { execFileSync, spawnSync } from "node:child_process";

const has = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;

const major = Number(process.versions.node.split(".")[0]);
if (major < 22) {
  console.error(
    `Floodgate needs Node >= 22 (found ${process.version}). Run it through npm (npm start / npm test) after \`npm install\`, which brings Node 22.`,
  );
  process.exit(1);
}

if (!has("redis-server")) {
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (!isRoot || !has("apt-get")) {
    console.error("redis-server is missing. Install it with: sudo apt-get install -y redis-server");
    process.exit(1);
  }
  console.error("redis-server is missing; installing Debian's redis-server (one time)…");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  execFileSync("apt-get", ["update", "-qq"], { stdio: ["ignore", "ignore", "inherit"], env });
  execFileSync("apt-get", ["install", "-y", "-qq", "--no-install-recommends", "redis-server"], {
    stdio: ["ignore", "ignore", "inherit"],
    env,
  });
  // Debian starts a system-wide instance on 6379; Floodgate never uses it and starts its own.
  spawnSync("sh", ["-c", "service redis-server stop || systemctl stop redis-server"], { stdio: "ignore" });
}
