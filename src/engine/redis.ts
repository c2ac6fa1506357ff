/**
 * The one port to Redis: Upstash's REST API over `fetch` (docs/redis-port.md). A command is `POST /` with the
 * command as a JSON array; a batch is `POST /pipeline` (not atomic) or `POST /multi-exec` (one transaction).
 * Nothing is ever retried: a decision must never be counted twice. Every failure is one {@link StoreError},
 * its kind read from the HTTP status and the Redis error's code (src/engine/store-error.ts).
 *
 * Replies are JSON as Redis sent them: no base64 (strings the scripts and admin keys hold are ASCII), no
 * parsing of strings into numbers or objects; a hash comes back as its flat `[field, value, …]` array.
 */
import { malformedReply, requestFailure, restError, StoreError, timedOut } from "./store-error";

/** One argument of a command: numbers travel as JSON numbers, as Redis reads them. */
export type RedisArg = string | number;

/** One Redis command, its name first: `["hgetall", key]`. */
export type RedisCommand = readonly RedisArg[];

/** A Lua script the port runs by its SHA-1 (`EVALSHA`), sending its source only when Redis lacks it. */
export interface RedisScript {
  /** What logs and docs call it. */
  readonly name: string;
  /** The text sent with `EVAL`. */
  readonly source: string;
  /** SHA-1 (hex) of `source`, what `EVALSHA` names; computed once. */
  sha(): Promise<string>;
}

/**
 * How long one call may take. Without either field, each request of the call has the port's `timeoutMs`.
 */
export interface CallBudget {
  /** When the whole call must be answered by (`Date.now()` ms): all its requests, a NOSCRIPT reload too. */
  deadline?: number;
  /** Aborts the call's requests (the caller's one timer); then the port starts no timer of its own. */
  signal?: AbortSignal;
}

/** Redis, as everything in Floodgate reaches it. */
export interface RedisPort {
  /**
   * Sends one command and resolves to its reply.
   * @throws {StoreError} when Redis cannot answer or refuses the command.
   */
  send(command: RedisCommand, budget?: CallBudget): Promise<unknown>;
  /**
   * Sends several commands in one request, NOT atomically (others may run between them), and resolves to
   * their replies in order.
   * @throws {StoreError} the first failed command's, after all of them ran.
   */
  pipeline(commands: readonly RedisCommand[], budget?: CallBudget): Promise<unknown[]>;
  /**
   * Runs several commands as one transaction (`MULTI`/`EXEC`: nobody sees a state between them) and resolves
   * to their replies. On a Redis Cluster their keys must share a slot.
   * @throws {StoreError} the first failed command's (the others still ran, as Redis does).
   */
  multi(commands: readonly RedisCommand[], budget?: CallBudget): Promise<unknown[]>;
  /**
   * Runs `script` on `keys` and `args`: `EVALSHA` first; when Redis answers `NOSCRIPT` (it restarted or
   * flushed its scripts), `EVAL` once, which caches it again. Both share the budget.
   * @throws {StoreError} when Redis cannot answer, or the script fails (`script`).
   */
  runScript(
    script: RedisScript,
    keys: readonly string[],
    args: readonly RedisArg[],
    budget?: CallBudget,
  ): Promise<unknown>;
}

/** Options of {@link createRedisPort}. */
export interface RedisPortOptions {
  /** Upstash REST URL (`UPSTASH_REDIS_REST_URL`). */
  url: string;
  /** Upstash REST token (`UPSTASH_REDIS_REST_TOKEN`). */
  token: string;
  /** Timeout of one request of a call given no budget, ms. */
  timeoutMs: number;
}

/** The REST URLs the port accepts, a trailing `/` removed (as Upstash's own clients do). */
export const REST_URL_SHAPE = /^https?:\/\/[^\s#$./?].\S*$/;

/** One REST reply: a command's, or a batch's item. */
type Reply = { result?: unknown; error?: unknown };

/**
 * A port on one REST endpoint. Validates the URL once; no I/O until the first call.
 * @example
 * const redis = createRedisPort({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN, timeoutMs: 5000 });
 * const modes = await redis.send(["hgetall", "rl:mode"]);
 */
export function createRedisPort(options: RedisPortOptions): RedisPort {
  const { token, timeoutMs } = options;
  const url = options.url.replace(/\/$/, "");
  // Never the URL in the message: it may carry a token (`?_token=`).
  if (!REST_URL_SHAPE.test(url)) throw new Error("`url` must be an http(s) URL: the database's REST URL");
  // Shared by every request (fetch copies them; never mutated).
  const headers = { "Content-Type": "application/json", authorization: `Bearer ${token}` };
  // Each script's SHA once known: a call then awaits only its fetch.
  const shas = new Map<RedisScript, string>();

  const signalOf = ({ deadline, signal }: CallBudget): AbortSignal =>
    signal ?? AbortSignal.timeout(deadline === undefined ? timeoutMs : Math.max(1, deadline - Date.now()));

  /** POSTs `body` to `path`; resolves to the parsed reply of a 2xx, throws the REST error of any other. */
  async function post(path: string, body: unknown, budget: CallBudget): Promise<unknown> {
    let status: number;
    let text: string;
    try {
      const response = await fetch(url + path, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: signalOf(budget),
      });
      status = response.status;
      text = await response.text();
    } catch (error) {
      throw requestFailure(error);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw malformedReply(status);
    }
    if (status >= 200 && status < 300) return parsed;
    const error = (parsed as Reply | null)?.error;
    throw typeof error === "string" ? restError(status, error) : malformedReply(status);
  }

  /** A reply's result, or its error thrown. */
  function resultOf(reply: unknown, status = 200): unknown {
    const { result, error } = (reply ?? {}) as Reply;
    if (typeof error === "string") throw restError(status, error);
    if (result === undefined) throw malformedReply(status);
    return result;
  }

  async function batch(path: string, commands: readonly RedisCommand[], budget: CallBudget) {
    const replies = await post(path, commands, budget);
    // A transaction Upstash discarded whole answers one `{"error"}` instead of one reply per command.
    if (!Array.isArray(replies)) return [resultOf(replies)];
    return replies.map((reply) => resultOf(reply));
  }

  const send = async (command: RedisCommand, budget: CallBudget = {}) =>
    resultOf(await post("", command, budget));

  return {
    send,
    pipeline: (commands, budget = {}) => batch("/pipeline", commands, budget),
    multi: (commands, budget = {}) => batch("/multi-exec", commands, budget),
    async runScript(script, keys, args, budget = {}) {
      let sha = shas.get(script);
      if (sha === undefined) {
        sha = await script.sha();
        shas.set(script, sha);
      }
      try {
        return await send(["evalsha", sha, keys.length, ...keys, ...args], budget);
      } catch (error) {
        if (!(error instanceof StoreError && error.code === "NOSCRIPT")) throw error;
      }
      // Redis restarted or flushed its scripts: EVAL runs it once and caches it again, within what is left.
      if (budget.deadline !== undefined && Date.now() >= budget.deadline) throw timedOut();
      return send(["eval", script.source, keys.length, ...keys, ...args], budget);
    },
  };
}
