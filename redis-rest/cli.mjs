#!/usr/bin/env node
// `npm run redis-rest -- --port <p> --token <t> [--redis redis://host:port] [--cluster]`
// Runs the local Upstash-compatible REST server alone, in front of the given Redis or of a redis-server it
// starts itself (ephemeral, nothing on disk). With --cluster: in front of a Redis Cluster, the one whose seed
// nodes --redis lists (comma-separated), or a 3-master cluster (one replica each) it starts itself.
// Prints `listening on http://127.0.0.1:<p>` once ready.
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { startRedisCluster } from "./redis-cluster.mjs";
import { startRedis } from "./redis-server.mjs";
import { startRestServer } from "./server.mjs";

const usage =
  "usage: npm run redis-rest -- [--port <p>] [--token <t>] [--redis redis://host:port[,redis://…]] [--cluster]";
/** @type {{ port?: string, token?: string, redis?: string, cluster?: boolean, help?: boolean }} */
let options;
try {
  ({ values: options } = parseArgs({
    options: {
      port: { type: "string" },
      token: { type: "string" },
      redis: { type: "string" },
      cluster: { type: "boolean" },
      help: { type: "boolean" },
    },
  }));
} catch (error) {
  console.error(`${error instanceof Error ? error.message : error}\n${usage}`);
  process.exit(2);
}
if (options.help) {
  console.log(usage);
  process.exit(0);
}
const port = options.port === undefined ? 0 : Number(options.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`--port must be a port number, got ${options.port}\n${usage}`);
  process.exit(2);
}

const token = options.token ?? randomBytes(24).toString("base64url");
const cluster = options.cluster ?? false;
/** @type {{ urls: string[], close: () => Promise<void> } | undefined} */
let redis;
try {
  if (!options.redis)
    redis = cluster ? await startRedisCluster() : await startRedis().then((r) => ({ ...r, urls: [r.url] }));
} catch (error) {
  console.error(`cannot start Redis: ${error instanceof Error ? error.message : error}`);
  process.exit(1);
}
let server;
try {
  const redisUrl = options.redis ?? /** @type {{ urls: string[] }} */ (redis).urls.join(",");
  server = await startRestServer({ redisUrl, cluster, token, port });
} catch (error) {
  console.error(`cannot start the REST server: ${error instanceof Error ? error.message : error}`);
  await redis?.close();
  process.exit(1);
}
if (redis)
  console.error(`${cluster ? "Redis Cluster" : "redis-server"} (ephemeral) at ${redis.urls.join(", ")}`);
if (!options.token) console.error(`token: ${token}`);
console.log(`listening on ${server.url}`);

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await server.close();
  await redis?.close();
  process.exit(0);
};
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
// Re-parented means whoever started it (npm, a shell) is gone: stop rather than linger.
const parentPid = process.ppid;
setInterval(() => {
  if (process.ppid !== parentPid) stop();
}, 500).unref();
