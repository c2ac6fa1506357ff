/**
 * A primary and two regions (eu, us), each its own redis-server behind its own REST server, an echo origin, and
 * one real Worker (bundled as for deploy, in Miniflare/workerd) pinned to each region with RATE_LIMIT_REGION:
 * the tests of regional databases (docs/regions.md).
 */
import { Redis as IORedis } from "ioredis";
import {
  type RedisHandle,
  type RestServer,
  startRedisServers,
  startRestServer,
} from "../../redis-rest/index.mjs";
import { startEchoOrigin } from "../support/echo-origin.mjs";
import { startWorker } from "../support/miniflare-worker.mjs";

const TOKEN = "regions-test-token";
export const REGION_NAMES = ["eu", "us"] as const;
export type RegionName = (typeof REGION_NAMES)[number];

export interface RegionsStack {
  /** The primary's redis-server, and a direct client of it. */
  primary: RedisHandle;
  primaryRedis: IORedis;
  /** Each region's redis-server and a direct client of it. */
  regions: Record<RegionName, { server: RedisHandle; redis: IORedis }>;
  /** A Worker pinned to each region. */
  workers: Record<RegionName, Awaited<ReturnType<typeof startWorker>>>;
  close(): Promise<void>;
}

/** Starts the stack; `bindings` add to (and may override) the Redis and region ones. */
export async function startRegionsStack(bindings: Record<string, string>): Promise<RegionsStack> {
  const servers = await startRedisServers(3);
  const rests: RestServer[] = await Promise.all(
    servers.map((s) => startRestServer({ redisUrl: s.url, token: TOKEN })),
  );
  const direct = servers.map((s) => {
    const redis = new IORedis(s.url, { maxRetriesPerRequest: 0 });
    redis.on("error", () => {}); // a test may kill its server
    return redis;
  });
  const origin = await startEchoOrigin();
  const common = {
    ORIGIN_URL: origin.url,
    UPSTASH_REDIS_REST_URL: (rests[0] as RestServer).url,
    UPSTASH_REDIS_REST_TOKEN: TOKEN,
    RATE_LIMIT_REGIONS: JSON.stringify({ eu: ["EU", "AF"], us: ["NA", "SA"] }),
    UPSTASH_REDIS_REST_URL_EU: (rests[1] as RestServer).url,
    UPSTASH_REDIS_REST_TOKEN_EU: TOKEN,
    UPSTASH_REDIS_REST_URL_US: (rests[2] as RestServer).url,
    UPSTASH_REDIS_REST_TOKEN_US: TOKEN,
    ...bindings,
  };
  const [eu, us] = await Promise.all(
    REGION_NAMES.map((region) => startWorker({ bindings: { ...common, RATE_LIMIT_REGION: region } })),
  );
  return {
    primary: servers[0] as RedisHandle,
    primaryRedis: direct[0] as IORedis,
    regions: {
      eu: { server: servers[1] as RedisHandle, redis: direct[1] as IORedis },
      us: { server: servers[2] as RedisHandle, redis: direct[2] as IORedis },
    },
    workers: {
      eu: eu as Awaited<ReturnType<typeof startWorker>>,
      us: us as Awaited<ReturnType<typeof startWorker>>,
    },
    close: async () => {
      await Promise.all([eu?.dispose(), us?.dispose()]);
      for (const redis of direct) redis.disconnect();
      await origin.close();
      await Promise.all(rests.map((r) => r.close()));
      await Promise.all(servers.map((s) => s.close()));
    },
  };
}
