// The scanners that read a response's real cost as its body streams through (src/middleware/settle-scan.ts):
// the same answer however the body is cut into chunks, the SSE spec's line ends and fields, and bounded memory
// (an event or a JSON body too long to keep is not read: the reservation stands).
import { describe, expect, it } from "vitest";
import { MAX_EVENT_CHARS, MAX_JSON_BYTES, scannerOf, unitsOf } from "../../src/middleware/settle-scan";

const sse = (path: string) => scannerOf({ kind: "sse", path: path.split("."), text: `sse:${path}` });
const json = (path: string) => scannerOf({ kind: "json", path: path.split("."), text: `json:${path}` });

/** What `scanner` finds in `text` fed in chunks of `size` bytes. */
function scan(scanner: ReturnType<typeof sse>, text: string, size = Number.POSITIVE_INFINITY) {
  const bytes = new TextEncoder().encode(text);
  const step = Math.min(size, bytes.length || 1);
  for (let at = 0; at < bytes.length; at += step) scanner.chunk(bytes.subarray(at, at + step));
  return scanner.end();
}

const chunk = (usage: unknown) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ delta: { content: "é ✓" } }], usage })}\n\n`;
const OPENAI = `${chunk(null)}${chunk(null)}${chunk({ prompt_tokens: 5, completion_tokens: 37, total_tokens: 42 })}data: [DONE]\n\n`;

describe("sse: the last server-sent event carrying the path", () => {
  it.each([1, 2, 3, 7, 64, 1000])("reads OpenAI's usage chunk cut into %i-byte chunks", (size) => {
    expect(scan(sse("usage.total_tokens"), OPENAI, size)).toEqual({ units: 42 });
  });

  it("finds the key wherever a chunk boundary cuts it, across every chunk size up to two events", () => {
    // Many events without the key, and the key in three of them: each cut point puts the key, an event's end or
    // a blank line on a seam somewhere.
    const events = Array.from({ length: 30 }, (_, i) =>
      i === 4 || i === 17
        ? chunk({ total_tokens: i })
        : i === 25
          ? chunk({ total_tokens: 1000 + i })
          : chunk(null),
    );
    const stream = `${events.join("")}data: [DONE]\n\n`;
    for (let size = 1; size <= 2 * (events[0] ?? "").length; size++)
      expect(scan(sse("usage.total_tokens"), stream, size), `${size}-byte chunks`).toEqual({ units: 1025 });
  });

  it("reads Anthropic's message_delta, the last of two events carrying usage.output_tokens", () => {
    const stream = [
      'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}\n\n',
      'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"hi"}}\n\n',
      'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":15}}\n\n',
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ].join("");
    expect(scan(sse("usage.output_tokens"), stream, 5)).toEqual({ units: 15 });
    expect(scan(sse("message.usage.input_tokens"), stream, 5)).toEqual({ units: 25 });
  });

  it("finds a key longer than the search samples, and not a longer one that begins the same", () => {
    // The search samples the key's first 16 bytes (quote included); "cache_read_input_tokens" is 25. Events that
    // hold keys sharing those 16 bytes but not the rest must not be read as carrying the path.
    const event = (usage: unknown) => `data: ${JSON.stringify({ type: "message_delta", usage })}\n\n`;
    const stream = [
      event({ cache_read_input_tokens: 7 }),
      event({ cache_read_input_tokens_total: 999 }),
      event({ cache_read_input: 998, cache_read_input_tokenz: 997 }),
      event({ output_tokens: 3 }),
    ].join("");
    for (let size = 1; size <= stream.length; size += size < 64 ? 1 : 97)
      expect(scan(sse("usage.cache_read_input_tokens"), stream, size), `${size}-byte chunks`).toEqual({
        units: 7,
      });
    expect(
      scan(sse("usage.cache_read_input_tokens"), `${stream}${event({ cache_read_input_tokens: 8 })}`),
    ).toEqual({
      units: 8,
    });
  });

  it("splits lines on \\r\\n and \\r as well, even with the pair cut between chunks, and joins multi-line data", () => {
    const crlf = OPENAI.replaceAll("\n", "\r\n");
    for (const size of [1, 2, 5, 33])
      expect(scan(sse("usage.total_tokens"), crlf, size)).toEqual({ units: 42 });
    expect(scan(sse("usage.total_tokens"), OPENAI.replaceAll("\n", "\r"), 4)).toEqual({ units: 42 });
    const multi = 'data: {"usage":\ndata: {"total_tokens": 9}}\n\n: a comment\n\n';
    expect(scan(sse("usage.total_tokens"), multi, 3)).toEqual({ units: 9 });
  });

  it("keeps a later event's value over an earlier one, but not a later event that lacks it", () => {
    const two =
      'data: {"usage":{"total_tokens":3}}\n\ndata: {"usage":{"total_tokens":8}}\n\ndata: {"usage":null}\n\n';
    expect(scan(sse("usage.total_tokens"), two, 6)).toEqual({ units: 8 });
  });

  it("reads a last event that no blank line ends (a stream cut right after its usage)", () => {
    expect(scan(sse("usage.total_tokens"), 'data: {"usage":{"total_tokens":4}}', 3)).toEqual({ units: 4 });
  });

  it("says why when no event carries a number there", () => {
    expect(scan(sse("usage.total_tokens"), `${chunk(null)}data: [DONE]\n\n`)).toEqual({
      missing: "no event carried the path",
    });
    expect(scan(sse("usage.total_tokens"), 'data: {"usage":{"total_tokens":"12"}}\n\n')).toEqual({
      missing: "not a number",
    });
    expect(scan(sse("usage.total_tokens"), 'data: {"usage":{"total_tokens":-1}}\n\n')).toEqual({
      missing: "a negative number",
    });
    expect(scan(sse("usage.total_tokens"), 'data: {"usage": {"total_tokens": 3} \n\n')).toEqual({
      missing: "no event carried the path",
    });
  });

  it("skips an event longer than it keeps, and reads the next one", () => {
    const huge = `data: {"usage":{"total_tokens":1},"pad":"${"x".repeat(2 * MAX_EVENT_CHARS)}"}\n\n`;
    expect(scan(sse("usage.total_tokens"), huge, 64 * 1024)).toEqual({
      missing: "no event carried the path",
    });
    expect(
      scan(sse("usage.total_tokens"), `${huge}data: {"usage":{"total_tokens":6}}\n\n`, 64 * 1024),
    ).toEqual({
      units: 6,
    });
    const crlf = `${huge.replaceAll("\n", "\r\n")}data: {"usage":{"total_tokens":7}}\r\n\r\n`;
    expect(scan(sse("usage.total_tokens"), crlf, 50_000)).toEqual({ units: 7 });
  });
});

describe("a scanner keeps nothing of a chunk's buffer", () => {
  // On Workers each chunk is read into one of two buffers that the next read but one overwrites
  // (src/middleware/settle.ts): what a scanner keeps of a chunk it must copy.
  /** What `scanner` finds in `text` fed through one buffer, overwritten with noise after each chunk. */
  function scanReused(scanner: ReturnType<typeof sse>, text: string, size: number) {
    const bytes = new TextEncoder().encode(text);
    const buffer = new Uint8Array(size);
    for (let at = 0; at < bytes.length; at += size) {
      const part = bytes.subarray(at, at + size);
      buffer.set(part);
      scanner.chunk(buffer.subarray(0, part.length));
      buffer.fill(0x22); // '"': what a stale view would then read
    }
    return scanner.end();
  }

  it.each([1, 5, 64, 300])("the same answer from %i-byte chunks through one reused buffer", (size) => {
    const events = Array.from({ length: 12 }, (_, i) => chunk(i === 9 ? { total_tokens: 77 } : null));
    const stream = `${events.join("")}data: [DONE]\n\n`;
    expect(scanReused(sse("usage.total_tokens"), stream, size)).toEqual({ units: 77 });
    expect(
      scanReused(sse("usage.total_tokens"), `${stream}data: {"usage":{"total_tokens":78}}`, size),
    ).toEqual({
      units: 78,
    });
    expect(
      scanReused(json("usage.total_tokens"), JSON.stringify({ usage: { total_tokens: 79 } }), size),
    ).toEqual({
      units: 79,
    });
  });
});

describe("json: the number at a path of the body", () => {
  it("reads it however the body is cut, arrays indexed by digits, fractions rounded up", () => {
    const body = JSON.stringify({ usage: { total_tokens: 42 }, items: [{ n: 1.2 }] });
    expect(scan(json("usage.total_tokens"), body, 3)).toEqual({ units: 42 });
    expect(scan(json("items.0.n"), body)).toEqual({ units: 2 });
  });

  it("says why when there is none, and does not keep a body longer than MAX_JSON_BYTES", () => {
    expect(scan(json("usage.total_tokens"), "{}")).toEqual({ missing: "no such path" });
    expect(scan(json("usage.total_tokens"), "not json")).toEqual({ missing: "the body is not JSON" });
    const long = JSON.stringify({ usage: { total_tokens: 1 }, pad: "x".repeat(MAX_JSON_BYTES) });
    expect(scan(json("usage.total_tokens"), long, 64 * 1024)).toEqual({
      missing: `the body is longer than ${MAX_JSON_BYTES} bytes`,
    });
  });
});

describe("a header's number", () => {
  it("takes digits and a fraction, nothing else", () => {
    expect(unitsOf(" 12 ", 1e9)).toEqual({ units: 12 });
    expect(unitsOf("2.5", 1e9)).toEqual({ units: 3 });
    for (const bad of ["", "1e3", "-4", "0x10", "twelve"])
      expect(unitsOf(bad, 1e9)).toHaveProperty("missing");
    expect(unitsOf("2000000000", 1e9)).toEqual({ missing: "more than 1000000000" });
  });
});
