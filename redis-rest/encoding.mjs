// Turns raw Redis replies (ioredis `callBuffer` with `stringNumbers`: Buffers for bulk and status strings,
// decimal strings for integers) into the JSON values Upstash's REST API answers with.

// JSON.rawJSON (Node >= 21) lets 64-bit integers reach the wire exactly, as Upstash sends them.
const rawJson = /** @type {((text: string) => unknown) | undefined} */ (/** @type {any} */ (JSON).rawJSON);
const OK = Buffer.from("OK");

/**
 * Converts one reply to its JSON form.
 *
 * With `base64` (request header `Upstash-Encoding: base64`) every string is base64 of its raw bytes, except a
 * top-level `OK`: that is exactly what @upstash/redis decodes (it keeps a top-level "OK" as is and decodes
 * every string inside arrays, so an "OK" there must be encoded too). Integers and nil are never encoded.
 * Without it, strings are UTF-8 decoded and invalid bytes become U+FFFD, as Upstash documents.
 * @param {unknown} reply
 * @param {boolean} base64
 * @param {boolean} [topLevel]
 * @returns {unknown}
 */
export function toJson(reply, base64, topLevel = true) {
  if (reply === null || reply === undefined) return null;
  if (typeof reply === "string") return integer(reply);
  if (typeof reply === "number") return reply;
  if (Buffer.isBuffer(reply)) {
    if (!base64 || (topLevel && reply.equals(OK))) return reply.toString("utf8");
    return reply.toString("base64");
  }
  if (Array.isArray(reply)) return reply.map((item) => toJson(item, base64, false));
  // An error reply nested in an array (a script returning redis.error_reply inside a table): its text.
  if (reply instanceof Error) return toJson(Buffer.from(reply.message), base64, topLevel);
  return null;
}

/**
 * A Redis integer, given as its decimal text.
 * @param {string} text
 */
function integer(text) {
  const value = Number(text);
  return Number.isSafeInteger(value) || !rawJson ? value : rawJson(text);
}
