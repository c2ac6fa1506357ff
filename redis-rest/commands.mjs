// Runs REST commands on one shared ioredis connection: a single command, a pipeline (in order, not atomic),
// or a transaction (MULTI … EXEC written back to back, so no other request's command can land inside it).
import { ReplyError } from "ioredis";

/**
 * Commands that would change the shared connection's state, block it, or are not offered by Upstash's REST
 * API (transactions go through /multi-exec; blocking and pub/sub commands are unsupported there too).
 */
const REFUSED = new Set([
  "multi",
  "exec",
  "discard",
  "watch",
  "unwatch",
  "select",
  "auth",
  "hello",
  "quit",
  "reset",
  "swapdb",
  "subscribe",
  "psubscribe",
  "ssubscribe",
  "unsubscribe",
  "punsubscribe",
  "sunsubscribe",
  "monitor",
  "sync",
  "psync",
  "blpop",
  "brpop",
  "brpoplpush",
  "blmove",
  "blmpop",
  "bzpopmin",
  "bzpopmax",
  "bzmpop",
  "wait",
  "waitaof",
]);

/** A request the server refuses before Redis sees it (bad shape, refused command): HTTP 400. */
export class BadCommand extends Error {}

/** Redis could not be reached or did not answer in time: HTTP 503. */
export class Unavailable extends Error {}

/**
 * Checks one command array from a request body and turns JSON numbers and booleans into strings.
 * @param {unknown} command
 * @param {string} where e.g. "command" or "command 3", used in the error text
 * @returns {Array<string | Buffer>}
 */
export function parseCommand(command, where = "command") {
  if (!Array.isArray(command) || command.length === 0) {
    throw new BadCommand(`ERR ${where} must be a non-empty JSON array like ["SET","key","value"]`);
  }
  const args = command.map((arg, i) => {
    if (typeof arg === "string" || Buffer.isBuffer(arg)) return arg;
    if ((typeof arg === "number" && Number.isFinite(arg)) || typeof arg === "boolean") return String(arg);
    throw new BadCommand(
      `ERR ${where}: argument ${i} must be a string or a number, got ${JSON.stringify(arg)}`,
    );
  });
  if (typeof args[0] !== "string" || args[0] === "")
    throw new BadCommand(`ERR ${where}: the command name must be a string`);
  const name = args[0].toLowerCase();
  const blocking =
    (name === "xread" || name === "xreadgroup") && args.some((a) => String(a).toLowerCase() === "block");
  const replyOff = name === "client" && String(args[1] ?? "").toLowerCase() === "reply";
  if (REFUSED.has(name) || blocking || replyOff) {
    throw new BadCommand(
      `ERR Command is not available over REST: '${args.slice(0, blocking || replyOff ? 2 : 1).join(" ")}'`,
    );
  }
  return args;
}

/**
 * @typedef {{ result: unknown } | { error: string }} Outcome  a raw reply, or a Redis error's text
 */

/**
 * Binds the executor to a connection and a script translator.
 * @param {import("ioredis").Redis} redis
 * @param {import("./scripts.mjs").ScriptTranslator} scripts
 */
export function createExecutor(redis, scripts) {
  /**
   * One command. A Redis error is an outcome; a lost connection or timeout throws Unavailable.
   * @param {Array<string | Buffer>} args
   * @returns {Promise<Outcome>}
   */
  async function run(args) {
    const { command, reply, error } = scripts.prepare(args);
    try {
      const result = await redis.callBuffer(wireName(command[0]), ...command.slice(1));
      return { result: reply ? reply(result) : result };
    } catch (e) {
      if (e instanceof ReplyError) return { error: error ? error(e.message) : e.message };
      throw unavailable(e);
    }
  }

  /**
   * Commands in order, each with its own outcome (Upstash pipelines are not atomic). Sent together, so
   * they share one round trip to Redis.
   * @param {Array<Array<string | Buffer> | BadCommand>} commands
   */
  const pipeline = (commands) => runAll(commands, run);

  /**
   * An atomic transaction. A command Redis refuses while queueing discards the whole transaction: that
   * error is thrown as BadCommand (Upstash answers one `{"error"}`). Runtime errors are per-command outcomes.
   * @param {Array<Array<string | Buffer>>} commands
   * @returns {Promise<Outcome[]>}
   */
  async function transaction(commands) {
    const prepared = commands.map((c) => scripts.prepare(c));
    const multi = redis.multi();
    for (const { command } of prepared) multi.callBuffer(wireName(command[0]), ...command.slice(1));
    /** @type {Array<[Error | null, unknown]> | null} */
    let results;
    try {
      results = await multi.exec();
    } catch (e) {
      if (e instanceof ReplyError) {
        const first = /** @type {{ previousErrors?: Error[] }} */ (e).previousErrors?.[0];
        throw new BadCommand(first ? first.message : e.message);
      }
      throw unavailable(e);
    }
    if (!results) throw new BadCommand("ERR transaction aborted");
    return results.map(([err, result], i) => {
      const { reply, error } = prepared[i] ?? {};
      if (!err) return { result: reply ? reply(result) : result };
      if (err instanceof ReplyError) return { error: error ? error(err.message) : err.message };
      throw unavailable(err);
    });
  }

  return { run, pipeline, transaction };
}

/**
 * Runs commands concurrently through `run`, outcomes in request order; a refused command is its own error
 * outcome. Commands for one connection keep their order on it.
 * @param {Array<Array<string | Buffer> | BadCommand>} commands
 * @param {(args: Array<string | Buffer>) => Promise<Outcome>} run
 * @returns {Promise<Outcome[]>}
 */
export async function runAll(commands, run) {
  const settled = await Promise.allSettled(
    commands.map((c) => (c instanceof BadCommand ? Promise.resolve({ error: c.message }) : run(c))),
  );
  const lost = settled.find((s) => s.status === "rejected");
  if (lost) throw lost.reason;
  return settled.map((s) => /** @type {PromiseFulfilledResult<Outcome>} */ (s).value);
}

/**
 * The command name as sent to Redis. Upper case on purpose: ioredis looks up its reply transformers by the
 * exact lower-case name (it would turn HGETALL's flat array into an object and lose binary field names),
 * and Redis itself does not care.
 * @param {string | Buffer | undefined} name
 */
const wireName = (name) => String(name).toUpperCase();

/**
 * @param {unknown} e
 * @returns {Unavailable}
 */
function unavailable(e) {
  const reason = e instanceof Error ? e.message : String(e);
  return new Unavailable(`ERR Redis is unavailable: ${reason}`);
}
