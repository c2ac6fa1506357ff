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
  let tail = ""; // the text after the last complete event, "\n" line ends
  let skipping = false; // the current event grew past MAX_EVENT_CHARS: dropped up to its end
  let heldCR = false; // the previous text ended in "\r", which a "\n" opening the next may complete
  let found: ScanResult = { missing: "no event carried the path" };

  /** One complete event's text ("\n" line ends, no blank line): its number at the path, if it carries it. */
  function event(text: string): void {
    if (!text.includes(needle)) return;
    const data: string[] = [];
    for (const line of text.split("\n")) {
      if (!line.startsWith("data")) continue; // comments, event, id, retry: not the data
      if (line.length === 4) data.push("");
      else if (line.charCodeAt(4) === 58)
        data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(data.join("\n"));
    } catch {
      return; // not JSON: not an event that carries the path
    }
    const value = at(parsed, path);
    if (value !== undefined && value !== null) found = numberAt(value);
  }

  /**
   * The text's complete events, read where they may carry the path; the rest kept for the next text. Only
   * native searches run over the whole stream: an event is split into lines only when it names the key.
   */
  function feed(raw: string, last: boolean): void {
    let text = raw;
    if (heldCR) text = `\r${text}`;
    heldCR = !last && text.endsWith("\r");
    if (heldCR) text = text.slice(0, -1);
    if (text.includes("\r")) text = text.replace(/\r\n?/g, "\n");
    let buffer = tail + text;
    let end = buffer.lastIndexOf("\n\n");
    if (last && end < 0 && buffer !== "") {
      buffer += "\n\n"; // a last event not followed by a blank line still counts: a stream cut after its usage
      end = buffer.length - 2;
    }
    if (end < 0) {
      tail = buffer;
    } else {
      let from = 0;
      if (skipping) {
        // The oversized event's rest, up to its end: dropped.
        from = buffer.indexOf("\n\n") + 2;
        skipping = false;
      }
      for (let hit = buffer.indexOf(needle, from); hit >= 0 && hit < end; hit = buffer.indexOf(needle, hit)) {
        const start = buffer.lastIndexOf("\n\n", hit); // -1: the event opens the buffer
        const stop = buffer.indexOf("\n\n", hit);
        event(buffer.slice(Math.max(start < 0 ? 0 : start + 2, from), stop));
        hit = stop + 2;
      }
      tail = buffer.slice(end + 2);
    }
    if (tail.length > MAX_EVENT_CHARS) {
      tail = "";
      skipping = true;
    }
  }

  return {
    chunk(chunk) {
      feed(decoder.decode(chunk, { stream: true }), false);
    },
    end() {
      feed(decoder.decode(), true);
      return found;
    },
  };
}
