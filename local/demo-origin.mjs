// The origin `npm start` puts behind the Worker when ORIGIN_URL is not given: it says hello and shows what
// arrived, so the proxying (path, query, X-Forwarded-*) is visible with curl. `/login` is a login form's
// endpoint for the README's brute-force recipe: 200 for the password `correct horse`, else 401.
import { createServer } from "node:http";
import { closable } from "../redis-rest/close-server.mjs";

/**
 * Starts the demo origin on 127.0.0.1.
 * @param {{ port?: number }} [options] default port: a free one the OS picks
 * @returns {Promise<{ url: string, close: () => Promise<void> }>}
 */
export async function startDemoOrigin({ port = 0 } = {}) {
  const server = createServer((req, res) => {
    if (new URL(req.url ?? "/", "http://demo.invalid").pathname === "/login") {
      login(req, res);
      return;
    }
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
