// The HTTP side of the local Upstash-compatible REST server: routes, auth, bodies, status codes.
// Behaviour is described in docs/development.md, "The local Upstash-compatible REST server (`redis-rest/`)", and follows
// what @upstash/redis sends and expects.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";
import { Redis } from "ioredis";
import { closable } from "./close-server.mjs";
import { connectCluster, createClusterExecutor } from "./cluster.mjs";
import { BadCommand, createExecutor, parseCommand, Unavailable } from "./commands.mjs";
import { toJson } from "./encoding.mjs";
import { parseJson, pathCommand, readBody, rootCommand } from "./request.mjs";
import { ScriptTranslator } from "./scripts.mjs";

const METHODS = "GET, HEAD, POST, PUT";

/**
 * @typedef {object} RestServer
 * @property {string} url `http://127.0.0.1:<port>`, for UPSTASH_REDIS_REST_URL
 * @property {string} token for UPSTASH_REDIS_REST_TOKEN
 * @property {number} port
 * @property {() => Promise<void>} close stops listening and disconnects from Redis (not Redis itself)
 */

/**
 * Starts the REST server in this process, in front of the Redis at `redisUrl`, or with `cluster` in front
 * of the Redis Cluster whose seed nodes `redisUrl` lists (comma-separated `redis://host:port` URLs).
 *
 * While Redis is unreachable every request is answered at once with 503 `{"error"}` (nothing is queued,
 * so nothing runs late), and the connection is re-established on its own when Redis is back.
 * @param {object} options
 * @param {string} options.redisUrl e.g. `redis://127.0.0.1:6379`
 * @param {boolean} [options.cluster] route by hash slot across a Redis Cluster (see cluster.mjs)
 * @param {string} [options.token] the bearer token clients must send (default: a random one)
 * @param {number} [options.port] default: a free port the OS picks
 * @param {string} [options.host] default `127.0.0.1`
 * @param {number} [options.commandTimeoutMs] a Redis reply slower than this answers 503 (default 5000)
 * @param {number} [options.maxBodyBytes] larger request bodies get 413 (default 10 MB, Upstash's limit)
 * @param {number} [options.rttMs] a network round trip to add to every request, ms (default 0): half before the
 *   command runs, half after, as a request that crossed an ocean (see {@link pathDelay})
 * @returns {Promise<RestServer>}
 */
export async function startRestServer({
  redisUrl,
  cluster = false,
  token = randomBytes(24).toString("base64url"),
  port = 0,
  host = "127.0.0.1",
  commandTimeoutMs = 5000,
  maxBodyBytes = 10 * 1024 * 1024,
  rttMs = 0,
}) {
  if (!Number.isFinite(rttMs) || rttMs < 0) throw new Error(`rttMs must be a number ≥ 0, got ${rttMs}`);
  const travel = pathDelay(rttMs);
  /** @type {import("ioredis").RedisOptions} */
  const redisOptions = {
    // Fail fast instead of queueing: a limiter decision that runs seconds late is worse than an error.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    // Never resend after a reconnect: EVALSHA of a limiter is not idempotent.
    autoResendUnfulfilledCommands: false,
    commandTimeout: commandTimeoutMs,
    retryStrategy: (attempt) => Math.min(attempt * 50, 500),
    stringNumbers: true,
    lazyConnect: true,
  };
  const redis = cluster
    ? connectCluster(redisUrl.split(","), redisOptions)
    : new Redis(redisUrl, redisOptions);
  redis.on("error", () => {}); // connection errors surface per request as 503; reconnecting is automatic
  // Redis may come up later (requests get 503 until then), and a cluster whose first ready check fails
  // (a node not yet seeing `cluster_state:ok`) reconnects without ever settling this promise: the server
  // starts after at most 5 s either way.
  await new Promise((resolve) => {
    redis.connect().then(resolve, resolve);
    setTimeout(resolve, 5000).unref();
  });
  if (!(redis instanceof Redis)) {
    // Every node's connection ready before the first request (the offline queue is off); at most 2 s.
    const ready = (/** @type {import("ioredis").Redis} */ node) =>
      node.status === "ready"
        ? undefined
        : new Promise((resolve) => {
            node.once("ready", resolve);
            setTimeout(resolve, 2000).unref();
          });
    await Promise.all(redis.nodes().map(ready));
  }

  const scripts = new ScriptTranslator();
  const exec =
    redis instanceof Redis ? createExecutor(redis, scripts) : createClusterExecutor(redis, scripts);
  const tokenDigest = digest(token);
  let syncToken = 0;

  const server = createServer((req, res) => {
    answer(req, res).catch(() => {
      if (res.headersSent || res.destroyed) return;
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: "ERR internal error in the local REST server" }));
    });
  });
  // An idle keep-alive connection stays open a minute (Node's default is 5 s): a client busy past its own idle
  // timer (fetch's, 5 s less its margin) then still finds it open, instead of sending a request on a socket
  // this side is closing ("other side closed" in 500-request bursts on a loaded machine). Headers may take
  // as long, as Node asks.
  server.keepAliveTimeout = 60_000;
  server.headersTimeout = 61_000;

  /**
   * One request, over the added round trip if any: the way there before its command runs (so it runs when
   * it would have reached a faraway Redis), the way back before its answer is written.
   * @param {import("node:http").IncomingMessage} req
   * @param {import("node:http").ServerResponse} res
   */
  async function answer(req, res) {
    await travel();
    const { status, body, headers = {} } = await handle(req);
    await travel();
    if (res.destroyed) return;
    res.writeHead(status, {
      "content-type": "application/json",
      // Read-your-writes token; a single Redis has nothing to wait for, so any increasing value works.
      "upstash-sync-token": String(++syncToken),
      ...headers,
    });
    res.end(JSON.stringify(body));
  }

  /**
   * @param {import("node:http").IncomingMessage} req
   * @returns {Promise<{ status: number, body: unknown, headers?: Record<string, string> }>}
   */
  async function handle(req) {
    const method = req.method ?? "GET";
    if (!METHODS.split(", ").includes(method)) {
      req.resume();
      return {
        status: 405,
        body: { error: `ERR method ${method} is not allowed` },
        headers: { allow: METHODS },
      };
    }
    const url = new URL(req.url ?? "/", "http://localhost");
    if (!authorized(req.headers.authorization, url.searchParams.get("_token"), tokenDigest)) {
      req.resume();
      return { status: 401, body: { error: "Unauthorized: missing or invalid auth token" } };
    }
    const format = String(req.headers["upstash-response-format"] ?? "json").toLowerCase();
    if (format !== "json")
      return { status: 400, body: { error: `ERR Upstash-Response-Format ${format} is not supported here` } };
    const base64 = String(req.headers["upstash-encoding"] ?? "").toLowerCase() === "base64";

    const body = await readBody(req, maxBodyBytes);
    if (body === null)
      return { status: 413, body: { error: `ERR request body larger than ${maxBodyBytes} bytes` } };

    try {
      const path = url.pathname.replace(/\/+$/, "");
      if (path === "/pipeline" || path === "/multi-exec") {
        if (method !== "POST" && method !== "PUT") {
          return { status: 405, body: { error: `ERR ${path} needs POST` }, headers: { allow: "POST, PUT" } };
        }
        const batch = parseJson(body);
        if (!Array.isArray(batch) || batch.length === 0 || !batch.every(Array.isArray)) {
          throw new BadCommand(
            'ERR the body must be a non-empty JSON array of commands, like [["SET","k","v"],["GET","k"]]',
          );
        }
        if (path === "/multi-exec") {
          const outcomes = await exec.transaction(batch.map((c, i) => parseCommand(c, `command ${i}`)));
          return { status: 200, body: outcomes.map((o) => encode(o, base64)) };
        }
        const commands = batch.map((c, i) => {
          try {
            return parseCommand(c, `command ${i}`);
          } catch (e) {
            if (e instanceof BadCommand) return e;
            throw e;
          }
        });
        return { status: 200, body: (await exec.pipeline(commands)).map((o) => encode(o, base64)) };
      }
      const command = path === "" ? rootCommand(method, body) : pathCommand(path, url, method, body);
      const outcome = await exec.run(command);
      return { status: "error" in outcome ? 400 : 200, body: encode(outcome, base64) };
    } catch (e) {
      if (e instanceof BadCommand) return { status: 400, body: { error: e.message } };
      if (e instanceof Unavailable) return { status: 503, body: { error: e.message } };
      throw e;
    }
  }

  const closeServer = closable(server);
  try {
    await new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => resolve(undefined));
    });
  } catch (error) {
    // A port already taken: the Redis connection would otherwise keep reconnecting, and this process alive.
    redis.disconnect();
    throw error;
  }
  const address = server.address();
  const actualPort = typeof address === "object" && address ? address.port : port;
  return {
    url: `http://${host}:${actualPort}`,
    token,
    port: actualPort,
    close: async () => {
      await closeServer();
      redis.disconnect();
    },
  };
}

/**
 * @param {import("./commands.mjs").Outcome} outcome
 * @param {boolean} base64
 */
function encode(outcome, base64) {
  // Error texts are never encoded: the client reads them as they are.
  return "error" in outcome ? { error: outcome.error } : { result: toJson(outcome.result, base64) };
}

/**
 * Half of `rttMs` as a wait, for each leg of a request (the request's way to Redis, the answer's way back):
 * so a command runs at the time it would reach a faraway database, and commands sent at once still run
 * concurrently, as over a real network. Nothing to wait for at 0.
 * @param {number} rttMs
 * @returns {() => Promise<void> | void}
 */
export function pathDelay(rttMs) {
  const legMs = rttMs / 2;
  if (legMs <= 0) return () => undefined;
  return () => new Promise((resolve) => setTimeout(resolve, legMs));
}

/** @param {string} value */
const digest = (value) => createHash("sha256").update(value).digest();

/**
 * `Authorization: Bearer <token>` or `?_token=<token>`, compared in constant time (both sides hashed first,
 * so neither the content nor the length of the token leaks through timing).
 * @param {string | undefined} header
 * @param {string | null} queryToken
 * @param {Buffer} expected
 */
function authorized(header, queryToken, expected) {
  const bearer = /^Bearer\s+(.+)$/i.exec(header ?? "")?.[1]?.trim();
  const given = bearer ?? queryToken;
  return given != null && timingSafeEqual(digest(given), expected);
}
