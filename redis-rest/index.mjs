// A local Upstash-compatible REST server in front of a real redis-server, for tests, benches and `npm start`.

export { CROSSSLOT } from "./cluster.mjs";
export {
  freePort,
  killGroupWithParent,
  portTaken,
  removeWithParent,
  spawnTied,
  stopChild,
  waitForOutput,
} from "./processes.mjs";
export { startRedisCluster, startRedisServers } from "./redis-cluster.mjs";
export { startRedis } from "./redis-server.mjs";
export { stripKeyLocking } from "./scripts.mjs";
export { startRestServer } from "./server.mjs";
