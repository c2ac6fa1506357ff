/**
 * Shared by the admin tests: an env with the admin token, rules and a unique prefix; a Redis client on the
 * same REST server; and `call()` / `send()` to reach the Worker the way curl would.
 */

import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { Redis } from "@upstash/redis/cloudflare";
import { createRedisPort } from "../../src/engine/redis";
import type { Env } from "../../src/env";
import worker from "../../src/worker";

export const ADMIN_TOKEN = "test-admin-token-0123456789";

/** Bindings from vitest.config.ts (real Redis through the local REST server, the echo origin). */
export const baseEnv = env as unknown as Record<string, unknown> & {
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
};

/** A Redis client for setting up and checking state directly. */
export const redis = new Redis({
  url: baseEnv.UPSTASH_REDIS_REST_URL,
  token: baseEnv.UPSTASH_REDIS_REST_TOKEN,
  enableTelemetry: false,
  enableAutoPipelining: false,
});

/** The Worker's own Redis port on the same REST server, for calling its domain stores (live modes, change log). */
export const port = createRedisPort({
  url: baseEnv.UPSTASH_REDIS_REST_URL,
  token: baseEnv.UPSTASH_REDIS_REST_TOKEN,
  timeoutMs: 5000,
});

/**
 * A key prefix no other test uses, nor an earlier run of the same test (watch mode reuses the run's Redis):
 * `t-<name>-<8 hex digits>`. Each test takes its own, so no state carries over from one test to the next.
 */
export const uniquePrefix = (name: string): string => `t-${name}-${crypto.randomUUID().slice(0, 8)}`;

/** A test env: the given prefix (see `uniquePrefix`), the admin token, the given rules. */
export function makeEnv(prefix: string, rules: unknown[], extra: Record<string, unknown> = {}) {
  return {
    ...baseEnv,
    RATE_LIMIT_PREFIX: prefix,
    RATE_LIMIT_ADMIN_TOKEN: ADMIN_TOKEN,
    RATE_LIMIT_RULES: JSON.stringify(rules),
    ...extra,
  };
}

/** Calls the Worker (waiting for its background work), as `curl` would. */
export async function call(
  testEnv: Record<string, unknown>,
  path: string,
  init: RequestInit & { token?: string | null; ip?: string } = {},
): Promise<Response> {
  const headers = new Headers(init.headers);
  const token = init.token === undefined ? ADMIN_TOKEN : init.token;
  if (token !== null && path.startsWith("/__floodgate")) headers.set("Authorization", `Bearer ${token}`);
  if (init.ip) headers.set("CF-Connecting-IP", init.ip);
  const ctx = createExecutionContext();
  const response = await worker.fetch(
    new Request(`http://floodgate.test${path}`, { ...init, headers }),
    testEnv as Env,
    ctx,
  );
  await waitOnExecutionContext(ctx);
  return response;
}

/** A JSON admin call with a body. */
export const send = (testEnv: Record<string, unknown>, method: string, path: string, body: unknown) =>
  call(testEnv, path, {
    method,
    headers: { "Content-Type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
