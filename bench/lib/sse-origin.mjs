/**
 * An origin streaming an LLM-like response for bench/settle.mjs: `GET /<anything>?mb=<n>` answers
 * `text/event-stream`, `n` MB (default 10) of `chat.completion.chunk` events written in 64 KiB writes as fast
 * as the reader takes them (`&write=<bytes>`: writes of that size instead, e.g. 200 for about one event each, as
 * a model streams its tokens), then one event with the `usage` and `data: [DONE]`. Run as
 * `node bench/lib/sse-origin.mjs <port>`; prints `origin listening` once ready.
 */
import { createServer } from "node:http";

const port = Number(process.argv[2] ?? 0);
const WRITE_BYTES = 64 * 1024;

/** One event of ~200 bytes, as OpenAI streams them (usage null until the last). */
const event = `data: ${JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion.chunk",
  created: 1,
  model: "bench",
  choices: [{ index: 0, delta: { content: " flood" }, finish_reason: null }],
  usage: null,
})}\n\n`;

/** The body of `mb` megabytes of events, then the usage and the end, built once per size. */
const bodies = new Map();
function bodyOf(mb) {
  let body = bodies.get(mb);
  if (!body) {
    const count = Math.ceil((mb * 1024 * 1024) / event.length);
    const usage = { prompt_tokens: 10, completion_tokens: count, total_tokens: count + 10 };
    const last = `data: ${JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion.chunk", choices: [], usage })}\n\ndata: [DONE]\n\n`;
    body = Buffer.from(event.repeat(count) + last);
    bodies.set(mb, body);
  }
  return body;
}

const server = createServer((req, res) => {
  req.resume();
  const url = new URL(req.url ?? "/", "http://origin.invalid");
  const body = bodyOf(Number(url.searchParams.get("mb") ?? 10));
  const writeBytes = Number(url.searchParams.get("write") ?? WRITE_BYTES);
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  let at = 0;
  const pump = () => {
    while (at < body.length) {
      const chunk = body.subarray(at, at + writeBytes);
      at += chunk.length;
      if (!res.write(chunk)) {
        res.once("drain", pump);
        return;
      }
    }
    res.end();
  };
  pump();
});
server.listen(port, "127.0.0.1", () => console.log(`origin listening on ${server.address().port}`));
