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
export function startRedis(options?: { port?: number; bin?: string; args?: string[] }): Promise<RedisHandle>;

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
  redisUrl: string;
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
/** Resolves once pattern appears in the child's output. */
export function waitForOutput(
  child: ChildProcess,
  pattern: RegExp,
  timeoutMs: number,
): Promise<RegExpMatchArray>;
