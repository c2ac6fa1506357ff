import type { TestProject } from "vitest/node";
import { startRedis, startRestServer } from "../redis-rest/index.mjs";
import { startEchoOrigin } from "./support/echo-origin.mjs";

/**
 * Once per run: a real redis-server, the local Upstash-compatible REST server in front of it (random token)
 * and the echo origin, all on free ports. Tests isolate themselves by key prefix, so files run in parallel.
 */
export default async function setup(project: TestProject) {
  const redis = await startRedis();
  const rest = await startRestServer({ redisUrl: redis.url });
  const origin = await startEchoOrigin();
  project.provide("redisRestUrl", rest.url);
  project.provide("redisRestToken", rest.token);
  project.provide("redisUrl", redis.url);
  project.provide("originUrl", origin.url);
  return async () => {
    await Promise.allSettled([rest.close(), origin.close()]);
    await redis.close();
  };
}

declare module "vitest" {
  export interface ProvidedContext {
    redisRestUrl: string;
    redisRestToken: string;
    redisUrl: string;
    originUrl: string;
  }
}
