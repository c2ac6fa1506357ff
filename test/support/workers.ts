// Instances of the real Worker (each its own workerd, bundled as for deploy) for a Node test file, over the REST
// server: the run's shared one (test/global-setup.ts), or a redis-server, REST server and echo origin of the
// file's own, for a file that stops or kills Redis. `useWorkers` registers the file's beforeAll/afterAll: the
// instances start together and are disposed (with the file's own stack) when the file ends.
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, inject } from "vitest";
import { startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { startEchoOrigin } from "./echo-origin.mjs";
import { type MiniflareWorker, startWorker } from "./miniflare-worker.mjs";

export type Worker = MiniflareWorker;

/** A redis-server, its REST server and an echo origin of one test file's own. */
export interface OwnStack {
  redis: Awaited<ReturnType<typeof startRedis>>;
  rest: Awaited<ReturnType<typeof startRestServer>>;
  origin: Awaited<ReturnType<typeof startEchoOrigin>>;
}

/** What {@link useWorkers} starts. */
export interface WorkersOptions {
  /** The key prefix's stem (`RATE_LIMIT_PREFIX`); the process id and the time are appended. */
  name: string;
  /** How many instances (each its own isolate: its own caches, leases, breaker). @default 2 */
  count?: number;
  /**
   * Bindings beside the REST endpoint, the origin and the prefix, which they may override (non-strings
   * JSON-encoded); a function is called once `before` has run.
   */
  bindings?: Record<string, unknown> | (() => Record<string, unknown>);
  /** A stack of the file's own instead of the run's shared one. @default false */
  ownStack?: boolean;
  /** Extra set-up once the stack is up, before the instances start (e.g. an origin of the file's own). */
  before?: () => Promise<void>;
  /** Extra tear-down once the instances are disposed. */
  after?: () => Promise<void>;
}

/** The instances of one test file, and the Redis behind them. */
export interface Workers {
  /** The instances, in order: empty until the file's beforeAll has run, the same array throughout. */
  readonly workers: readonly Worker[];
  /** Instance `i`. */
  at(i: number): Worker;
  /** Instance `i` as a handle usable at module scope: each call goes to the instance once it has started. */
  handle(i: number): Worker;
  /** Redis itself (ioredis, lazily connected), to check what it holds. */
  readonly direct: IORedis;
  /** `RATE_LIMIT_PREFIX` of every instance. */
  readonly prefix: string;
  /** The file's own stack (`ownStack` only). */
  readonly stack: OwnStack;
  /** The bindings the instances run with, `overrides` applied: for an extra Worker a test starts itself. */
  bindings(overrides?: Record<string, unknown>): Record<string, unknown>;
}

/** Starts `options.count` Workers for this test file before its tests and disposes them after. */
export function useWorkers(options: WorkersOptions): Workers {
  const { name, count = 2, ownStack = false } = options;
  const prefix = `${name}-${process.pid}-${Date.now().toString(36)}`;
  const workers: Worker[] = [];
  let stack: OwnStack | undefined;
  let direct: IORedis | undefined;

  const bindings = (overrides: Record<string, unknown> = {}) => ({
    UPSTASH_REDIS_REST_URL: stack ? stack.rest.url : inject("redisRestUrl"),
    UPSTASH_REDIS_REST_TOKEN: stack ? stack.rest.token : inject("redisRestToken"),
    ORIGIN_URL: stack ? stack.origin.url : inject("originUrl"),
    RATE_LIMIT_PREFIX: prefix,
    ...(typeof options.bindings === "function" ? options.bindings() : options.bindings),
    ...overrides,
  });
  const at = (i: number): Worker => {
    const worker = workers[i];
    if (!worker) throw new Error(`Worker ${i} has not started (useWorkers starts them in beforeAll)`);
    return worker;
  };

  beforeAll(async () => {
    if (ownStack) {
      const redis = await startRedis();
      const [rest, origin] = await Promise.all([startRestServer({ redisUrl: redis.url }), startEchoOrigin()]);
      stack = { redis, rest, origin };
    }
    direct = new IORedis(stack ? stack.redis.url : inject("redisUrl"), {
      lazyConnect: true,
      maxRetriesPerRequest: 1,
    });
    direct.on("error", () => {}); // a test that kills Redis: the next command fails, nothing else
    await options.before?.();
    workers.push(
      ...(await Promise.all(Array.from({ length: count }, () => startWorker({ bindings: bindings() })))),
    );
  }, 120_000);

  afterAll(async () => {
    await Promise.all(workers.map((w) => w.dispose()));
    direct?.disconnect();
    await options.after?.();
    if (stack) {
      await Promise.allSettled([stack.origin.close(), stack.rest.close()]);
      await stack.redis.close();
    }
  });

  return {
    workers,
    at,
    handle: (i) => ({
      fetch: (path, init) => at(i).fetch(path, init),
      get url() {
        return at(i).url;
      },
      get logs() {
        return at(i).logs;
      },
      dispose: () => at(i).dispose(),
    }),
    get direct() {
      if (!direct) throw new Error("Redis is not reachable before the file's beforeAll");
      return direct;
    },
    prefix,
    get stack() {
      if (!stack) throw new Error("no stack of the file's own (ownStack: true)");
      return stack;
    },
    bindings,
  };
}
