// Reading a REST request: its body (bounded), and the Redis command it carries, either as a JSON array
// (`POST /`) or path style (`/<command>/<arg>/…?<more args>`).
import { BadCommand, parseCommand } from "./commands.mjs";

/**
 * `POST /` with a JSON command array.
 * @param {string} method
 * @param {Buffer} body
 */
export function rootCommand(method, body) {
  if (method !== "POST" && method !== "PUT") {
    throw new BadCommand('ERR no command: POST a JSON array like ["GET","key"], or use /<command>/<arg>/…');
  }
  return parseCommand(parseJson(body));
}

/**
 * Path style: `/<command>/<arg>/…`, then a POST body (raw bytes) as the next argument, then the query's
 * arguments: `POST /set/foo?EX=100` with body `v` is `SET foo v EX 100` (Upstash's REST docs).
 * @param {string} path the URL path without trailing slashes
 * @param {URL} url
 * @param {string} method
 * @param {Buffer} body
 */
export function pathCommand(path, url, method, body) {
  const [command = "", ...rest] = path.slice(1).split("/").map(decodeSegment);
  /** @type {Array<string | Buffer>} */
  const args = [command.toString(), ...rest];
  if ((method === "POST" || method === "PUT") && body.length > 0) args.push(body);
  for (const pair of url.search.slice(1).split("&")) {
    if (pair === "") continue;
    const [name = "", ...value] = pair.split("=");
    const key = decodeSegment(name.replace(/\+/g, " "));
    if (key.toString() === "_token") continue;
    args.push(key);
    if (value.length > 0 && value.join("=") !== "")
      args.push(decodeSegment(value.join("=").replace(/\+/g, " ")));
  }
  return parseCommand(args);
}

/**
 * Percent-decodes to raw bytes, so a path can carry any binary key or value (`%FF` is the byte 0xFF).
 * @param {string} segment
 * @returns {string | Buffer}
 */
function decodeSegment(segment) {
  if (!segment.includes("%")) return segment;
  if (/%(?![0-9a-fA-F]{2})/.test(segment)) {
    throw new BadCommand(`ERR invalid percent-encoding in ${JSON.stringify(segment)}`);
  }
  const parts = segment.split(/(%[0-9a-fA-F]{2})/);
  return Buffer.concat(
    parts.map((part) =>
      part.startsWith("%") ? Buffer.from([Number.parseInt(part.slice(1), 16)]) : Buffer.from(part),
    ),
  );
}

/** @param {Buffer} body */
export function parseJson(body) {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch {
    throw new BadCommand("ERR the request body is not valid JSON");
  }
}

/**
 * Reads the whole body, or returns null once it exceeds `limit` bytes.
 * @param {import("node:http").IncomingMessage} req
 * @param {number} limit
 * @returns {Promise<Buffer | null>}
 */
export function readBody(req, limit) {
  return new Promise((resolve, reject) => {
    /** @type {Buffer[]} */
    const chunks = [];
    let size = 0;
    // Past the limit the rest is read and dropped, so the 413 can still be written on this connection.
    req.on("data", (/** @type {Buffer} */ chunk) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
    });
    req.on("end", () => resolve(size > limit ? null : Buffer.concat(chunks)));
    req.on("error", reject);
  });
}
