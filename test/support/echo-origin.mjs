// An origin for tests: it answers every request with a JSON description of what it received, so a test can
// check what the proxy forwarded. A few paths misbehave on purpose (slow, streaming, redirecting, failing).
import { createHash, generateKeyPairSync } from "node:crypto";
import { createServer } from "node:http";
import { closable } from "../../redis-rest/close-server.mjs";

/**
 * @typedef {object} EchoOrigin
 * @property {string} url `http://127.0.0.1:<port>`
 * @property {number} port
 * @property {() => Promise<void>} close
 */

/**
 * Starts the echo origin on 127.0.0.1.
 *
 * - any path: 200 JSON `{ method, url, path, query, headers, bodyLength, bodyText? }` (bodyText when the body
 *   is valid UTF-8 and at most 64 KiB)
 * - `/slow?ms=N`: the same, with response headers delayed by N ms
 * - `/stream?chunks=N&delayMs=M`: N text chunks (`chunk <i>\n`), M ms apart
 * - `/redirect`: 302 with `Location: /elsewhere` (a proxy must pass it on, not follow it)
 * - `/status/<code>`: that status, with the usual JSON body (none for 204/304)
 * - `/login` with an `x-password` header: 200 when it is the password `correct horse`, else 401
 * - requests with an `x-count-tag` header are counted per tag; `GET /__counts/<tag>` answers `{ "count": n }`
 *   (so a test can count how many requests the proxy really let through); `GET /__inflight/<tag>` answers
 *   `{ "max": n }`, the most of them the origin was answering at once (the JSON of any path has
 *   `receivedAtMs`, the origin's clock when the request arrived)
 * - `/.well-known/jwks.json`: a JWKS with one ES256 public key (kid `test-es256`); `/__test-signing-key` gives the
 *   matching private JWK, so tests can sign tokens that verify against the JWKS (a test origin only!)
 * - `Upgrade: websocket` on `/ws`: completes the handshake and sends one text message, `hello <path>`
 *   (`/ws?delayMs=M`: M ms after the handshake)
 * @param {{ port?: number }} [options] default port: a free one the OS picks
 * @returns {Promise<EchoOrigin>}
 */
export async function startEchoOrigin({ port = 0 } = {}) {
  /** @type {Map<string, number>} */
  const counts = new Map();
  /** @type {Map<string, { now: number, max: number }>} */
  const inflight = new Map();
  const keys = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const jwk = { kid: "test-es256", alg: "ES256", use: "sig" };
  const publicJwks = JSON.stringify({ keys: [{ ...keys.publicKey.export({ format: "jwk" }), ...jwk }] });
  const privateJwk = JSON.stringify({ ...keys.privateKey.export({ format: "jwk" }), ...jwk });
  const server = createServer((req, res) => {
    // A client that goes away mid-request must not become an unhandled rejection in the test runner.
    respond(req, res).catch(() => res.destroy());
  });
  /**
   * @param {import("node:http").IncomingMessage} req
   * @param {import("node:http").ServerResponse} res
   */
  async function respond(req, res) {
    const url = new URL(req.url ?? "/", "http://origin.invalid");
    const counted = /^\/__counts\/(.+)$/.exec(url.pathname);
    if (counted) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ count: counts.get(decodeURIComponent(counted[1] ?? "")) ?? 0 }));
      return;
    }
    if (url.pathname === "/.well-known/jwks.json" || url.pathname === "/__test-signing-key") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(url.pathname === "/__test-signing-key" ? privateJwk : publicJwks);
      return;
    }
    const busy = /^\/__inflight\/(.+)$/.exec(url.pathname);
    if (busy) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ max: inflight.get(decodeURIComponent(busy[1] ?? ""))?.max ?? 0 }));
      return;
    }
    const tag = req.headers["x-count-tag"];
    if (typeof tag === "string") {
      counts.set(tag, (counts.get(tag) ?? 0) + 1);
      const state = inflight.get(tag) ?? { now: 0, max: 0 };
      state.now += 1;
      state.max = Math.max(state.max, state.now);
      inflight.set(tag, state);
      res.on("close", () => {
        state.now -= 1;
      });
    }
    /** @type {Buffer[]} */
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const echo = describe(req, url, body);

    if (url.pathname === "/slow") {
      await sleep(Number(url.searchParams.get("ms") ?? 1000));
      if (res.destroyed) return;
    }
    if (url.pathname === "/stream") {
      const count = Number(url.searchParams.get("chunks") ?? 5);
      const delayMs = Number(url.searchParams.get("delayMs") ?? 100);
      res.writeHead(200, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
      for (let i = 0; i < count && !res.destroyed; i++) {
        if (i > 0) await sleep(delayMs);
        res.write(`chunk ${i}\n`);
      }
      res.end();
      return;
    }
    if (url.pathname === "/redirect") {
      res.writeHead(302, { location: "/elsewhere", "content-type": "application/json" });
      res.end(JSON.stringify(echo));
      return;
    }
    const status = /^\/status\/(\d{3})$/.exec(url.pathname);
    const password = req.headers["x-password"];
    const refused = url.pathname === "/login" && password !== undefined && password !== "correct horse";
    const code = status ? Number(status[1]) : refused ? 401 : 200;
    if (code === 204 || code === 304) {
      res.writeHead(code);
      res.end();
      return;
    }
    res.writeHead(code, { "content-type": "application/json" });
    res.end(JSON.stringify(echo));
  }

  server.on("upgrade", (req, socket) => {
    const key = req.headers["sec-websocket-key"];
    if (!req.url?.startsWith("/ws") || typeof key !== "string") {
      socket.end("HTTP/1.1 400 Bad Request\r\n\r\n");
      return;
    }
    const accept = createHash("sha1").update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest("base64");
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
    );
    const text = Buffer.from(`hello ${req.url}`);
    const delayMs = Number(new URL(req.url, "http://origin.invalid").searchParams.get("delayMs") ?? 0);
    // One unmasked text frame (server → client frames are never masked); short payloads only.
    setTimeout(() => socket.write(Buffer.concat([Buffer.from([0x81, text.length]), text])), delayMs);
    socket.on("error", () => undefined);
    socket.on("data", () => undefined);
  });

  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(undefined));
  });
  const address = server.address();
  const actualPort = typeof address === "object" && address ? address.port : port;
  return {
    url: `http://127.0.0.1:${actualPort}`,
    port: actualPort,
    close: closable(server),
  };
}

/**
 * @param {import("node:http").IncomingMessage} req
 * @param {URL} url
 * @param {Buffer} body
 */
function describe(req, url, body) {
  /** @type {Record<string, string | string[]>} */
  const query = {};
  for (const [name, value] of url.searchParams) {
    const prior = query[name];
    query[name] = prior === undefined ? value : [...(Array.isArray(prior) ? prior : [prior]), value];
  }
  /** @type {Record<string, unknown>} */
  const echo = {
    method: req.method,
    url: req.url,
    path: url.pathname,
    query,
    headers: req.headers,
    // As the lines came (Node joins a field sent twice in `headers`): name, value, name, value, …
    rawHeaders: req.rawHeaders,
    bodyLength: body.length,
    receivedAtMs: Date.now(),
  };
  if (body.length > 0 && body.length <= 65_536) {
    const text = body.toString("utf8");
    if (!text.includes("\uFFFD")) echo.bodyText = text;
  }
  return echo;
}

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
