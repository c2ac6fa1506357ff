// The origin `npm start` puts behind the Worker when ORIGIN_URL is not given: it says hello and shows what
// arrived, so the proxying (path, query, X-Forwarded-*) is visible with curl.
import { createServer } from "node:http";
import { closable } from "../redis-rest/close-server.mjs";

/**
 * Starts the demo origin on 127.0.0.1.
 * @param {{ port?: number }} [options] default port: a free one the OS picks
 * @returns {Promise<{ url: string, close: () => Promise<void> }>}
 */
export async function startDemoOrigin({ port = 0 } = {}) {
  const server = createServer((req, res) => {
    req.resume();
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
