/**
 * Reading a response's real cost while its body streams through unchanged (docs/settle.md): a scanner sees
 * every chunk once, keeps what it needs in bounded memory, and answers when the body has ended.
 * - `sse`: the last server-sent event whose JSON data has a number at the path (OpenAI's `usage` chunk,
 *   Anthropic's `message_delta`). Events are split as the SSE spec says (lines, `data:` fields, a blank line
 *   ends one); only an event whose data names the path's last key is parsed, so a long stream costs one
 *   pass over its text and a `JSON.parse` of one or two small events.
 * - `json`: a number at the path of the JSON body, read from at most `MAX_JSON_BYTES` of it.
 */
import type { SettleSource } from "../config";

/** Most bytes of a JSON body kept to read its cost from; a longer body keeps its reservation. */
export const MAX_JSON_BYTES = 1 << 20;
/** Most characters of one server-sent event's data (or one line) kept; a longer event is skipped. */
export const MAX_EVENT_CHARS = 1 << 20;

/** What a scan found: a cost, or why there is none. */
export type ScanResult = { units: number } | { missing: string };

/** Sees the body's chunks in order, then says what it found. */
export interface Scanner {
  chunk(bytes: Uint8Array): void;
  end(): ScanResult;
}

/** The scanner of a body source (`json:` or `sse:`). */
export function scannerOf(source: SettleSource & { kind: "json" | "sse" }): Scanner {
  return source.kind === "json" ? jsonScanner(source.path) : sseScanner(source.path);
}

/**
 * A cost as a response states it: a finite number from 0 to `max`, fractions rounded up (a token is never
 * given back for rounding). Anything else says why it is not one.
 */
export function unitsOf(value: unknown, max: number): ScanResult {
  // A header's text is a number written out (digits, maybe a fraction); JSON's must be a number.
  const n = typeof value === "string" && /^\s*\d+(\.\d+)?\s*$/.test(value) ? Number(value) : value;
  if (typeof n !== "number" || !Number.isFinite(n)) return { missing: "not a number" };
  if (n < 0) return { missing: "a negative number" };
  if (n > max) return { missing: `more than ${max}` };
  return { units: Math.ceil(n) };
}

/** The value at `path` in parsed JSON (a segment of digits also indexes an array), or `undefined`. */
function at(value: unknown, path: readonly string[]): unknown {
  let here = value;
  for (const segment of path) {
    if (here === null || typeof here !== "object") return undefined;
    here = Object.hasOwn(here, segment) ? (here as Record<string, unknown>)[segment] : undefined;
  }
  return here;
}

/** A JSON value as a cost: a number only (a string of digits in JSON is not one). */
const numberAt = (value: unknown): ScanResult =>
  typeof value === "number" ? unitsOf(value, MAX_UNITS) : { missing: "not a number" };

/** The largest cost a settlement accepts (a rule's largest `cost`: keeps Redis's integers exact). */
const MAX_UNITS = 1_000_000_000;

function jsonScanner(path: readonly string[]): Scanner {
  const decoder = new TextDecoder();
  let text = "";
  let bytes = 0;
  return {
    chunk(chunk) {
      bytes += chunk.byteLength;
      if (bytes <= MAX_JSON_BYTES) text += decoder.decode(chunk, { stream: true });
    },
    end() {
      if (bytes > MAX_JSON_BYTES) return { missing: `the body is longer than ${MAX_JSON_BYTES} bytes` };
      let parsed: unknown;
      try {
        parsed = JSON.parse(text + decoder.decode());
      } catch {
        return { missing: "the body is not JSON" };
      }
      const value = at(parsed, path);
      return value === undefined ? { missing: "no such path" } : numberAt(value);
    },
  };
}

function sseScanner(path: readonly string[]): Scanner {
  const decoder = new TextDecoder();
  // The path's last key as it appears in JSON text: an event without it cannot carry the path.
  const needle = JSON.stringify(path[path.length - 1]);
  let line = ""; // the current line's text so far
  let lineTooLong = false;
  let data: string[] = []; // the current event's `data` fields
  let dataChars = 0;
  let found: ScanResult = { missing: "no event carried the path" };
  let afterCR = false; // the previous chunk ended in "\r": a "\n" opening this one ends no second line

  function dispatch(): void {
    if (dataChars > MAX_EVENT_CHARS) {
      data = [];
      dataChars = 0;
      return;
    }
    if (data.length === 0) return;
    const text = data.length === 1 ? (data[0] as string) : data.join("\n");
    data = [];
    dataChars = 0;
    if (!text.includes(needle)) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return; // not JSON: not an event that carries the path
    }
    const value = at(parsed, path);
    if (value === undefined || value === null) return;
    found = numberAt(value);
  }

  function field(text: string): void {
    if (text === "") {
      dispatch();
      return;
    }
    if (!text.startsWith("data")) return; // comments, event, id, retry: not the data
    if (text.length === 4) {
      data.push("");
      return;
    }
    if (text.charCodeAt(4) !== 58) return; // "data" followed by something else than ":": another field
    const value = text.charCodeAt(5) === 32 ? text.slice(6) : text.slice(5);
    dataChars += value.length + 1;
    if (dataChars <= MAX_EVENT_CHARS) data.push(value);
  }

  function feed(text: string): void {
    let from = 0;
    if (afterCR && text.charCodeAt(0) === 10) from = 1;
    afterCR = false;
    // Where the next "\n" and "\r" are, each searched for again only once passed (native searches: a long
    // stream is scanned at memchr speed, not a JS loop per character).
    let nl = text.indexOf("\n", from);
    let cr = text.indexOf("\r", from);
    for (;;) {
      if (nl >= 0 && nl < from) nl = text.indexOf("\n", from);
      if (cr >= 0 && cr < from) cr = text.indexOf("\r", from);
      const end = nl < 0 ? cr : cr < 0 ? nl : Math.min(nl, cr);
      if (end < 0) {
        if (!lineTooLong) {
          line += text.slice(from);
          if (line.length > MAX_EVENT_CHARS) {
            line = "";
            lineTooLong = true;
          }
        }
        return;
      }
      const whole = lineTooLong ? undefined : line + text.slice(from, end);
      line = "";
      if (whole !== undefined) field(whole);
      else dataChars = MAX_EVENT_CHARS + 1; // the event had a line too long to keep: skipped
      lineTooLong = false;
      from = end + 1;
      if (text.charCodeAt(end) === 13) {
        if (from === text.length) afterCR = true;
        else if (text.charCodeAt(from) === 10) from++;
      }
    }
  }

  return {
    chunk(chunk) {
      feed(decoder.decode(chunk, { stream: true }));
    },
    end() {
      feed(decoder.decode());
      // A last event not followed by a blank line still counts: a stream cut right after its usage.
      if (!lineTooLong && line !== "") field(line);
      line = "";
      dispatch();
      return found;
    },
  };
}
