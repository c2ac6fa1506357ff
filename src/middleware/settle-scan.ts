/**
 * Reading a response's real cost while its body streams through unchanged (docs/settle.md): a scanner sees
 * every chunk once, keeps what it needs in bounded memory, and answers when the body has ended.
 * - `sse`: the last server-sent event whose JSON data has a number at the path (OpenAI's `usage` chunk,
 *   Anthropic's `message_delta`), events split as the SSE spec says (`\n`, `\r\n` or `\r` line ends, `data:`
 *   fields, a blank line ends one). The bytes are searched for the path's last key (sampled pairs of bytes; no
 *   decoding); only an event that holds it is decoded and parsed.
 * - `json`: a number at the path of the JSON body, read from at most `MAX_JSON_BYTES` of it.
 */
import type { SettleSource } from "../config";

/** Most bytes of a JSON body kept to read its cost from; a longer body keeps its reservation. */
export const MAX_JSON_BYTES = 1 << 20;
/** Most bytes of one server-sent event kept; a longer event is skipped. */
export const MAX_EVENT_CHARS = 1 << 20;

/** What a scan found: a cost, or why there is none. */
export type ScanResult = { units: number } | { missing: string };

/** Sees the body's chunks in order, then says what it found. */
export interface Scanner {
  /** One chunk; what it keeps of it, it copies: the caller reads the next chunk into the same buffer. */
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

const EMPTY = new Uint8Array(0);
const LF = 10;
const CR = 13;

/** Whether `b` ends a line (`\n` or `\r`). */
const isEol = (b: number | undefined): boolean => b === LF || b === CR;

/**
 * Where the last blank line in `bytes[0, limit)` ends (the index after it: where the next event starts), or -1.
 * A blank line is a line end right after another (`\n\n`, `\r\r`, `\r\n\r\n`, …; `\r\n` is one line end). A
 * `\r` at `limit - 1` may be the first half of a `\r\n`: not counted until the next byte is known.
 */
function lastEventEnd(bytes: Uint8Array, limit: number): number {
  for (let i = limit - 1; i >= 1; i--) {
    const c = bytes[i];
    if (!isEol(c)) continue;
    if (c === CR && i === limit - 1) continue; // maybe half of a "\r\n"
    // The line end at i, and where it begins (a "\r\n" begins at its "\r").
    const begins = c === LF && bytes[i - 1] === CR ? i - 1 : i;
    if (begins >= 1 && isEol(bytes[begins - 1])) return c === CR && bytes[i + 1] === LF ? i + 2 : i + 1;
  }
  return -1;
}

/** Where the event holding `at` begins in `bytes` (after the blank line before it, or `from`). */
function eventStart(bytes: Uint8Array, at: number, from: number): number {
  return Math.max(lastEventEnd(bytes, at), from);
}

/** Where the event holding `at` ends in `bytes` (where the blank line after it begins), or `limit`. */
function eventStop(bytes: Uint8Array, at: number, limit: number): number {
  for (let i = at; i < limit - 1; i++) {
    const c = bytes[i];
    if (!isEol(c)) continue;
    const next = afterEol(bytes, i);
    if (isEol(bytes[next])) return i;
    i = next - 1;
  }
  return limit;
}

/** The index after the line end at `i` (`\r\n` is one). */
const afterEol = (bytes: Uint8Array, i: number): number =>
  bytes[i] === CR && bytes[i + 1] === LF ? i + 2 : i + 1;

/**
 * A needle: its bytes, and where each pair of adjacent bytes of its first `PROBE_BYTES` (the probe) begins in it,
 * as a bit per offset under the pair's index (`bytes[k] << 8 | bytes[k + 1]`).
 */
interface Needle {
  bytes: Uint8Array;
  probe: number;
  pairs: Uint16Array;
}

/** How much of a needle the search samples: offsets 0–14 fit a pair's 16 bits (most JSON keys are shorter). */
const PROBE_BYTES = 16;

/** Needles by their text: a rule's path is one of few, and its table of pairs is 128 KiB. */
const needles = new Map<string, Needle>();

function needleOf(text: string): Needle {
  const known = needles.get(text);
  if (known) return known;
  const bytes = new TextEncoder().encode(text); // a JSON key with its quotes: 2 bytes at least
  const probe = Math.min(bytes.length, PROBE_BYTES);
  const pairs = new Uint16Array(1 << 16);
  for (let k = 0; k + 1 < probe; k++) {
    const pair = ((bytes[k] as number) << 8) | (bytes[k + 1] as number);
    pairs[pair] = (pairs[pair] as number) | (1 << k);
  }
  const needle = { bytes, probe, pairs };
  needles.set(text, needle);
  return needle;
}

/**
 * The first index of `needle` in `hay[from, limit)`, or -1. An occurrence spans `probe - 1` pairs of adjacent
 * bytes, so sampling one pair every `probe - 1` bytes meets one of them: a sampled pair the probe does not hold
 * (almost all of them) rules out every start it could belong to at once, and only a pair it holds is compared
 * at the start(s) it implies. The samples' loads do not depend on each other (a Horspool search's shift does on
 * the byte it read), so a chunk without the key is crossed in a fraction of a pass, never copied or decoded.
 */
function indexOfBytes(hay: Uint8Array, needle: Needle, from: number, limit: number): number {
  const { bytes, probe, pairs } = needle;
  const m = bytes.length;
  const stride = probe - 1;
  for (let j = from + probe - 2; j + 1 < limit; j += stride) {
    const offsets = pairs[((hay[j] as number) << 8) | (hay[j + 1] as number)] as number;
    if (offsets === 0) continue;
    // The starts this pair implies, earliest first (a later sample's starts all lie after this one's).
    for (let k = probe - 2; k >= 0; k--) {
      if ((offsets & (1 << k)) === 0) continue;
      const at = j - k;
      if (at < from || at + m > limit) continue;
      let p = 0;
      while (p < m && hay[at + p] === bytes[p]) p++;
      if (p === m) return at;
    }
  }
  return -1;
}

function sseScanner(path: readonly string[]): Scanner {
  // The path's last key as it appears in JSON text: an event without it cannot carry the path. Searched for in
  // the bytes (UTF-8 never puts an ASCII byte inside another character), and only an event holding it is decoded.
  const needle = needleOf(JSON.stringify(path[path.length - 1]));
  const decoder = new TextDecoder();
  let tail: Uint8Array = EMPTY; // the bytes after the last complete event
  let tailHolds = false; // the tail holds the key (an event that holds it, not complete yet)
  let skipping = false; // the current event grew past MAX_EVENT_CHARS bytes: dropped up to its end
  let found: ScanResult = { missing: "no event carried the path" };

  /** One complete event's text: its number at the path, if it carries it. */
  function event(text: string): void {
    const data: string[] = [];
    for (const line of text.split(/\r\n?|\n/)) {
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

  /** `chunk`'s complete events (with what was kept before) read where they hold the key; the rest kept. */
  function feed(chunk: Uint8Array, last: boolean): void {
    let bytes = chunk;
    if (tail.length > 0) {
      bytes = new Uint8Array(tail.length + chunk.length);
      bytes.set(tail);
      bytes.set(chunk, tail.length);
    }
    // A last event that no blank line ends still counts: a stream cut right after its usage.
    const end = last ? bytes.length : lastEventEnd(bytes, bytes.length);
    if (end < 0) {
      tail = bytes === chunk ? chunk.slice() : bytes; // a chunk's buffer is read into again after the scan: copied
    } else {
      let from = 0;
      if (skipping) {
        // The oversized event's rest, up to its end: dropped.
        const stop = eventStop(bytes, 0, end); // where the blank line ending it begins
        from = stop < end ? Math.min(afterEol(bytes, afterEol(bytes, stop)), end) : end;
        skipping = false;
      }
      for (let hit = indexOfBytes(bytes, needle, from, end); hit >= 0; ) {
        const start = eventStart(bytes, hit, from);
        const stop = eventStop(bytes, hit, end);
        if (stop - start <= MAX_EVENT_CHARS) event(decoder.decode(bytes.subarray(start, stop)));
        hit = indexOfBytes(bytes, needle, stop, end);
      }
      tail = end < bytes.length ? bytes.slice(end) : EMPTY;
    }
    if (tail.length > MAX_EVENT_CHARS) {
      tail = EMPTY;
      skipping = true;
    }
    tailHolds = indexOfBytes(tail, needle, 0, tail.length) >= 0;
  }

  /**
   * Whether `chunk` (with what was kept before) may hold the key: in the kept tail (an event not yet complete),
   * across the seam between the two, or in the chunk itself.
   */
  function mayHold(chunk: Uint8Array): boolean {
    if (tailHolds) return true;
    const m = needle.bytes.length;
    if (tail.length > 0) {
      const before = tail.subarray(Math.max(0, tail.length - (m - 1)));
      const seam = new Uint8Array(before.length + Math.min(m - 1, chunk.length));
      seam.set(before);
      seam.set(chunk.subarray(0, seam.length - before.length), before.length);
      if (indexOfBytes(seam, needle, 0, seam.length) >= 0) return true;
    }
    return indexOfBytes(chunk, needle, 0, chunk.length) >= 0;
  }

  return {
    chunk(chunk) {
      // Most chunks hold no event with the key: only their last event's beginning is kept (no copy of the
      // chunk, nothing decoded). One that ends no event inside it, or may hold the key, goes the long way.
      const end = mayHold(chunk) ? -1 : lastEventEnd(chunk, chunk.length);
      if (end < 0) {
        feed(chunk, false);
        return;
      }
      skipping = false; // an oversized event being dropped ended before `end`
      tail = end < chunk.length ? chunk.slice(end) : EMPTY;
    },
    end() {
      feed(new Uint8Array(0), true);
      return found;
    },
  };
}
