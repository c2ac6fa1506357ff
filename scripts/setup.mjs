#!/usr/bin/env node
// Brings what this machine lacks and npm cannot: redis-server and redis-cli (Debian's packages; redis-cli
// creates the local Redis Cluster); with `--test` (npm test's pretest) also prometheus and promtool, for the
// monitoring test (docs/monitoring.md): `npm start` does not need them.
// Node 22 itself arrives with `npm install` (the `node` devDependency puts it first on npm scripts' PATH).
import { ensurePrometheus, ensureRedis } from "./debian-package.mjs";

const major = Number(process.versions.node.split(".")[0]);
if (major < 22) {
  console.error(
    `Floodgate needs Node >= 22 (found ${process.version}). Run it through npm (npm start / npm test) after \`npm install\`, which brings Node 22.`,
  );
  process.exit(1);
}

try {
  ensureRedis();
  if (process.argv.includes("--test")) ensurePrometheus();
} catch (error) {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
}
