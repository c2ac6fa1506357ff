// The origin `npm start` puts behind the Worker when ORIGIN_URL is not given: it says hello and shows what
// arrived, so the proxying (path, query, X-Forwarded-*) is visible with curl. `/login` is a login form's
// endpoint for the README's brute-force recipe: 200 for the password `correct horse`, else 401. It also plays
// an LLM API, for the token-limited gateway recipe (docs/settle.md, "Try it"):
// - `POST /v1/chat/completions`, OpenAI-compatible: `{ "messages": [...], "max_tokens"?: n, "stream"?: true }`.
//   It answers `max_tokens` (default 16, at most 4096) words; prompt tokens are the words of the messages.
//   Streamed: server-sent events, one `chat.completion.chunk` per word, then one with empty `choices` and the
//   `usage` (as OpenAI sends with `stream_options.include_usage`), then `data: [DONE]`. Not streamed: one
//   `chat.completion` with its `usage`, and the total also in an `x-usage-total-tokens` header.
// - `GET /v1/usage`: `{ "total_tokens": n }`, every token it answered to this `Authorization` (the origin's own
//   bill, to compare with what Floodgate counted).
import { createServer } from "node:http";
import { closable } from "../redis-rest/close-server.mjs";

/** The most words one completion may ask for. */
const MAX_COMPLETION_TOKENS = 4096;

/**
 * Starts the demo origin on 127.0.0.1.
 * @param {{ port?: number }} [options] default port: a free one the OS picks
 * @returns {Promise<{ url: string, close: () => Promise<void> }>}
 */
export async function startDemoOrigin({ port = 0 } = {}) {
  /** @type {Map<string, number>} tokens answered per Authorization header */
  const billed = new Map();
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://origin.invalid");
    if (url.pathname === "/login") {
      login(req, res);
      return;
    }
    if (req.method === "POST" && url.pathname === "/v1/chat/completions") {
      readBody(req).then(
        (text) => completion(req, res, text, billed),
        () => res.destroy(),
      );
      return;
    }
    req.resume();
    if (req.method === "GET" && url.pathname === "/v1/usage") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(`${JSON.stringify({ total_tokens: billed.get(req.headers.authorization ?? "") ?? 0 })}\n`);
      return;
    }
    const forwarded = Object.fromEntries(
      Object.entries(req.headers).filter(([name]) => name.startsWith("x-forwarded-")),
    );
    res.writeHead(200, { "content-type": "application/json" });
    res.end(
      `${JSON.stringify({ message: "Hello from the Floodgate demo origin", method: req.method, url: req.url, forwarded })}\n`,
    );
  });
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(undefined));
  });
  const address = server.address();
  return {
    url: `http://127.0.0.1:${typeof address === "object" && address ? address.port : port}`,
    close: closable(server),
  };
}

/** The demo's only password: a login with it is answered 200, any other 401. */
const PASSWORD = "correct horse";

/**
 * `POST /login` with the password as the body (`curl -d 'correct horse'`) or in `x-password`.
 * @param {import("node:http").IncomingMessage} req
 * @param {import("node:http").ServerResponse} res
 */
function login(req, res) {
  /** @type {Buffer[]} */
  const chunks = [];
  req.on("data", (chunk) => chunks.push(chunk));
  req.on("end", () => {
    const given = req.headers["x-password"] ?? Buffer.concat(chunks).toString("utf8");
    const ok = given === PASSWORD;
    res.writeHead(ok ? 200 : 401, { "content-type": "application/json" });
    res.end(`${JSON.stringify(ok ? { message: "Welcome back" } : { message: "Wrong password" })}\n`);
  });
}

/**
 * @param {import("node:http").IncomingMessage} req
 * @returns {Promise<string>}
 */
function readBody(req) {
  return new Promise((resolve, reject) => {
    /** @type {Buffer[]} */
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

/**
 * One chat completion, streamed or not.
 * @param {import("node:http").IncomingMessage} req
 * @param {import("node:http").ServerResponse} res
 * @param {string} text the request body
 * @param {Map<string, number>} billed
 */
function completion(req, res, text, billed) {
  /** @type {{ messages?: { content?: unknown }[], max_tokens?: unknown, stream?: unknown, model?: unknown }} */
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    res.writeHead(400, { "content-type": "application/json" });
    res.end(
      `${JSON.stringify({ error: { message: "the body is not JSON", type: "invalid_request_error" } })}\n`,
    );
    return;
  }
  const asked = Number(body.max_tokens ?? 16);
  const completionTokens = Number.isInteger(asked) ? Math.min(Math.max(asked, 1), MAX_COMPLETION_TOKENS) : 16;
  const prompt = (Array.isArray(body.messages) ? body.messages : [])
    .map((m) => String(m?.content ?? ""))
    .join(" ");
  const promptTokens = Math.max(1, prompt.split(/\s+/).filter(Boolean).length);
  const usage = {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
  const who = req.headers.authorization ?? "";
  billed.set(who, (billed.get(who) ?? 0) + usage.total_tokens);
  const id = `chatcmpl-demo-${Date.now().toString(36)}`;
  const model = typeof body.model === "string" ? body.model : "demo";
  const created = Math.floor(Date.now() / 1000);
  const words = Array.from({ length: completionTokens }, (_, i) => (i === 0 ? "Hello" : " flood"));
  if (body.stream !== true) {
    res.writeHead(200, {
      "content-type": "application/json",
      "x-usage-total-tokens": String(usage.total_tokens),
    });
    const message = { role: "assistant", content: words.join("") };
    const choices = [{ index: 0, message, finish_reason: "stop" }];
    res.end(`${JSON.stringify({ id, object: "chat.completion", created, model, choices, usage })}\n`);
    return;
  }
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  const chunk = (choices, last) =>
    `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, choices, usage: last ? usage : null })}\n\n`;
  for (const [i, word] of words.entries()) {
    const delta = i === 0 ? { role: "assistant", content: word } : { content: word };
    res.write(chunk([{ index: 0, delta, finish_reason: i === words.length - 1 ? "stop" : null }], false));
  }
  res.write(chunk([], true));
  res.end("data: [DONE]\n\n");
}
