// Types for the local Upstash-compatible REST server (the implementation is plain ESM with JSDoc).
import type { ChildProcess, SpawnOptions } from "node:child_process";

/** A throwaway redis-server child process (see startRedis). */
export interface RedisHandle {
  /** `redis://127.0.0.1:<port>` */
  url: string;
  port: number;
  /** The current redis-server's pid (changes on restart). */
  pid(): number | undefined;
  /** SIGKILL, as a crash would; restart() can bring it back on the same port. */
  kill(): Promise<void>;
  /** SIGSTOP: the socket stays open but nothing answers. */
  stop(): void;
  /** SIGCONT after stop(). */
  cont(): void;
  /** A fresh, empty redis-server on the same port. */
  restart(): Promise<void>;
  /** Stops it for good and deletes its working directory. */
  close(): Promise<void>;
}

/** Spawns redis-server on 127.0.0.1 with nothing persisted; it dies with this process. */
export function startRedis(options?: {
  port?: number;
  bin?: string;
  /** Extra arguments, or a function giving them: asked again whenever a bind failure makes it pick another port. */
  args?: string[] | (() => Promise<string[]>);
}): Promise<RedisHandle>;

/** A throwaway Redis Cluster (see startRedisCluster). */
export interface ClusterHandle {
  /** Every node, masters first, then replicas; each can be killed, frozen or restarted like startRedis's. */
  nodes: RedisHandle[];
  /** Every node's `redis://127.0.0.1:<port>`: the seed list for a cluster client or the REST server. */
  urls: string[];
  /** What the node on `port` is now. */
  role(port: number): Promise<"master" | "replica">;
  /** Resolves once every live node reports `cluster_state:ok` and every replica is in sync. */
  waitUntilHealthy(): Promise<void>;
  /** Stops every node and deletes their folders. */
  close(): Promise<void>;
}

/**
 * Starts a real Redis Cluster (redis-server in cluster mode, created by `redis-cli --cluster create`):
 * `masters` masters (at least 3) with `replicas` replicas each, ephemeral, on free ports.
 */
export function startRedisCluster(options?: {
  masters?: number;
  replicas?: number;
  /** How long a master may be unreachable before its replica takes over. @default 1000 */
  nodeTimeoutMs?: number;
  bin?: string;
  cli?: string;
}): Promise<ClusterHandle>;

/** Starts `count` independent redis-servers (the several-databases mode). */
export function startRedisServers(
  count: number,
  options?: { bin?: string; args?: (index: number) => string[] | (() => Promise<string[]>) },
): Promise<RedisHandle[]>;

/** Redis's CROSSSLOT error text, which the REST server passes through as Upstash does. */
export const CROSSSLOT: string;

/** The REST server running in this process. */
export interface RestServer {
  /** `http://127.0.0.1:<port>`, for UPSTASH_REDIS_REST_URL */
  url: string;
  /** For UPSTASH_REDIS_REST_TOKEN */
  token: string;
  port: number;
  /** Stops listening and disconnects from Redis (Redis itself keeps running). */
  close(): Promise<void>;
}

/** Starts the Upstash-compatible REST server in front of the Redis at redisUrl. */
export function startRestServer(options: {
  /** The Redis, or with `cluster` the cluster's seed nodes, comma-separated. */
  redisUrl: string;
  /** Route commands by hash slot across a Redis Cluster (MOVED/ASK followed, CROSSSLOT passed through). */
  cluster?: boolean;
  /** Default: a random token. */
  token?: string;
  /** Default: a free port. */
  port?: number;
  /** Default: 127.0.0.1 */
  host?: string;
  /** A Redis reply slower than this answers 503. @default 5000 */
  commandTimeoutMs?: number;
  /** Larger bodies get 413. @default 10485760 */
  maxBodyBytes?: number;
  /**
   * A network round trip added to every request, ms: half before its command runs, half before its answer
   * is written (a database in another region). @default 0
   */
  rttMs?: number;
}): Promise<RestServer>;

/** The script Redis runs for a body whose shebang carries `allow-key-locking`, or null when it does not. */
export function stripKeyLocking(source: string): string | null;

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number>;
/** Whether 127.0.0.1:port is taken. */
export function portTaken(port: number): Promise<boolean>;
/** Spawns a child that is killed when this process dies. */
export function spawnTied(command: string, args: string[], options?: SpawnOptions): ChildProcess;
/** Sends a signal (SIGKILL after graceMs) and resolves when the child has exited. */
export function stopChild(
  child: ChildProcess,
  options?: { signal?: NodeJS.Signals; graceMs?: number; group?: boolean },
): Promise<void>;
/** Kills the process group pgid (and deletes removePaths) when this process dies, however it dies. */
export function killGroupWithParent(
  pgid: number,
  options?: { graceMs?: number; removePaths?: string[] },
): ChildProcess;
/** Deletes path when this process ends, however it ends (SIGKILL included); the function returned deletes it now. */
export function removeWithParent(path: string): () => void;
/** Resolves once pattern appears in the child's output. */
export function waitForOutput(
  child: ChildProcess,
  pattern: RegExp,
  timeoutMs: number,
): Promise<RegExpMatchArray>;
