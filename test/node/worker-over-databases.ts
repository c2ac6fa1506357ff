/**
 * The real Worker (bundled as for deploy, run in Miniflare/workerd) over several databases: one redis-server
 * each, each behind its own REST server, all listed in UPSTASH_REDIS_REST_URL, and an echo origin. For the
 * tests of how identities spread over databases (docs/scaling-out.md).
 */
import { Redis as IORedis } from "ioredis";
import {
  type RedisHandle,
  type RestServer,
  startRedisServers,
  startRestServer,
} from "../../redis-rest/index.mjs";
import { hashIdentity } from "../../src/engine/keys";
import { rendezvous } from "../../src/engine/shards";
import { startEchoOrigin } from "../support/echo-origin.mjs";
import { startWorker } from "../support/miniflare-worker.mjs";

const TOKEN = "databases-test-token";

export interface WorkerOverDatabases {
  /** The redis-servers, in UPSTASH_REDIS_REST_URL's order (a test may kill one). */
  servers: RedisHandle[];
  /** A direct client of each, to look at the keys as an operator would. */
  direct: IORedis[];
  worker: Awaited<ReturnType<typeof startWorker>>;
  /** Which database (index into `servers`) rendezvous hashing gives an identity hash, as the Worker does. */
  databaseOfHash(hash: string): number;
  /** The same for a plain identity. */
  databaseOf(identity: string): Promise<number>;
  close(): Promise<void>;
}

/** Starts `count` databases and the Worker over them; `bindings` add to (and may override) the Redis ones. */
export async function startWorkerOverDatabases(
  count: number,
  bindings: Record<string, string>,
): Promise<WorkerOverDatabases> {
  const servers = await startRedisServers(count);
  const rests: RestServer[] = await Promise.all(
    servers.map((s) => startRestServer({ redisUrl: s.url, token: TOKEN })),
  );
  const urls = rests.map((r) => r.url);
  const direct = servers.map((s) => {
    const redis = new IORedis(s.url, { maxRetriesPerRequest: 0 });
    redis.on("error", () => {}); // a test may kill its server
    return redis;
  });
  const origin = await startEchoOrigin();
  const worker = await startWorker({
    bindings: {
      ORIGIN_URL: origin.url,
      UPSTASH_REDIS_REST_URL: urls.join(","),
      UPSTASH_REDIS_REST_TOKEN: TOKEN,
      ...bindings,
    },
  });
  const shardOf = rendezvous(urls);
  return {
    servers,
    direct,
    worker,
    databaseOfHash: (hash) => shardOf(hash),
    databaseOf: async (identity) => shardOf(await hashIdentity(identity)),
    close: async () => {
      await worker.dispose();
      for (const redis of direct) redis.disconnect();
      await origin.close();
      await Promise.all(rests.map((r) => r.close()));
      await Promise.all(servers.map((s) => s.close()));
    },
  };
}
