/**
 * Shared by the proxy tests: a per-test env (unique key prefix, the test's rules), a way to call the Worker
 * exactly as workerd would (waiting for its background work), and the echo origin's request counter.
 */

import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { Redis } from "@upstash/redis/cloudflare";
import worker from "../../src/worker";

/** Bindings from vitest.config.ts: real Redis through the local REST server, and the echo origin. */
export const baseEnv = env as unknown as {
  UPSTASH_REDIS_REST_URL: string;
  UPSTASH_REDIS_REST_TOKEN: string;
  ORIGIN_URL: string;
};

/** A Redis client on the same REST server, to look at keys directly. */
export const redis = new Redis({
  url: baseEnv.UPSTASH_REDIS_REST_URL,
  token: baseEnv.UPSTASH_REDIS_REST_TOKEN,
  enableTelemetry: false,
  enableAutoPipelining: false,
});

/** A fresh env with its own key prefix (tests run in parallel against one Redis). */
export function makeEnv(rules: unknown, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    ...baseEnv,
    RATE_LIMIT_PREFIX: `t-${crypto.randomUUID().slice(0, 12)}`,
    RATE_LIMIT_RULES: typeof rules === "string" ? rules : JSON.stringify(rules),
    ...extra,
  };
}

/**
 * Two Worker instances on one key prefix, the i-th request going to `instance(i)`: two bindings objects are two
 * apps (src/worker.ts keeps one per bindings object), each with its own limiter, leases and deny cache, as two
 * isolates would be, sharing only Redis.
 */
export function twoInstances(env: Record<string, unknown>): (i: number) => Record<string, unknown> {
  const instances = [env, { ...env }];
  return (i) => instances[i % 2] as Record<string, unknown>;
}

/** A response with its body read. */
export interface Sent {
  status: number;
  headers: Headers;
  text: string;
  json<T = Record<string, unknown>>(): T;
}

/** Calls the Worker like a client would, reads the body, then waits for the Worker's background work. */
export async function send(
  testEnv: Record<string, unknown>,
  path: string,
  init: RequestInit & { ip?: string } = {},
): Promise<Sent> {
  const headers = new Headers(init.headers);
  if (init.ip) headers.set("CF-Connecting-IP", init.ip);
  const url = /^https?:/.test(path) ? path : `http://floodgate.test${path}`;
  const ctx = createExecutionContext();
  const response = await worker.fetch(
    new Request(url, { ...init, headers, redirect: "manual" }),
    testEnv as never,
    ctx,
  );
  const text = await response.text();
  await waitOnExecutionContext(ctx);
  return { status: response.status, headers: response.headers, text, json: () => JSON.parse(text) };
}

/** The raw Worker call, for tests that read the body themselves (streaming, WebSockets). */
export function fetchWorker(testEnv: Record<string, unknown>, request: Request) {
  const ctx = createExecutionContext();
  const response = worker.fetch(request, testEnv as never, ctx);
  return { response, done: () => waitOnExecutionContext(ctx) };
}

/** How many requests with `x-count-tag: <tag>` reached the origin. */
export async function originCount(tag: string): Promise<number> {
  const response = await fetch(`${baseEnv.ORIGIN_URL}/__counts/${encodeURIComponent(tag)}`);
  return ((await response.json()) as { count: number }).count;
}

/** The most requests with `x-count-tag: <tag>` the origin was answering at once (each until its body's end). */
export async function originPeak(tag: string): Promise<number> {
  const response = await fetch(`${baseEnv.ORIGIN_URL}/__inflight/${encodeURIComponent(tag)}`);
  return ((await response.json()) as { max: number }).max;
}

/** A unique tag for counting one test's requests at the origin. */
export const newTag = (): string => crypto.randomUUID();

/** Every Redis key under `prefix`, by a SCAN that runs to the end (one SCAN call sees only part of Redis). */
export async function keysUnder(prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor = "0";
  do {
    const [next, batch] = await redis.scan(cursor, { match: `${prefix}:*`, count: 1000 });
    keys.push(...batch.map(String));
    cursor = String(next);
  } while (cursor !== "0");
  return keys;
}
