// The settlement readers (src/middleware/settle-scan.ts) fuzzed through their exported reader only (`scannerOf`:
// chunks in, one answer out), against a whole-body reference written here from docs/settle.md and the SSE spec:
// however a body is cut into chunks the reader settles what the whole body states, and no input (bodies of
// events mixed with garbage, or random bytes) throws out of it or settles more than the body states.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { scannerOf } from "../../src/middleware/settle-scan";

type Found = { units: number } | { missing: string };

/** The largest cost a response may state (docs/settle.md: a rule's largest `cost`). */
const MAX_UNITS = 1_000_000_000;

/** A JSON value as a cost, as docs/settle.md states it: a number from 0 to MAX_UNITS, fractions rounded up. */
const costOf = (value: unknown): number | undefined =>
  typeof value === "number" && Number.isFinite(value) && value >= 0 && value <= MAX_UNITS
    ? Math.ceil(value)
    : undefined;

function valueAt(value: unknown, path: readonly string[]): unknown {
  let here = value;
  for (const segment of path) {
    if (here === null || typeof here !== "object" || !Object.hasOwn(here, segment)) return undefined;
    here = (here as Record<string, unknown>)[segment];
  }
  return here;
}

/**
 * The reference for `sse:`: the whole body decoded at once, split into events at blank lines (`\r\n`, `\r` or
 * `\n` line ends), each event's `data` fields joined by `\n`; of the events whose data is JSON with a non-null
 * value at the path, the last one decides. Only an event whose text names the path's last key (as JSON writes
 * it) is read: docs/settle.md says so, and the reader searches the bytes for it. `stated`: every cost any event
 * states at the path (what "no more than the body states" is checked against).
 */
function sseReference(bytes: Uint8Array, path: readonly string[]): { found?: unknown; stated: number[] } {
  const text = new TextDecoder().decode(bytes);
  const key = JSON.stringify(path[path.length - 1]);
  const stated: number[] = [];
  let found: unknown;
  let lines: string[] = [];
  const dispatch = () => {
    const raw = lines.join("\n");
    const data = lines.flatMap((line) =>
      line === "data" ? [""] : line.startsWith("data:") ? [line.slice(line[5] === " " ? 6 : 5)] : [],
    );
    lines = [];
    if (!raw.includes(key)) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(data.join("\n"));
    } catch {
      return;
    }
    const value = valueAt(parsed, path);
    if (value === undefined || value === null) return;
    found = value;
    const cost = costOf(value);
    if (cost !== undefined) stated.push(cost);
  };
  for (const line of text.split(/\r\n|\r|\n/)) {
    if (line === "") dispatch();
    else lines.push(line);
  }
  dispatch(); // a last event no blank line ends still counts
  return { found, stated };
}

/** What the reader answers for `bytes` cut at `cuts` (sorted offsets). */
function read(kind: "sse" | "json", path: string[], bytes: Uint8Array, cuts: readonly number[]): Found {
  const scanner = scannerOf({ kind, path, text: `${kind}:${path.join(".")}` });
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    // A copy per chunk, as a stream hands out buffers of its own.
    if (cut > from) scanner.chunk(bytes.slice(from, cut));
    from = Math.max(from, cut);
  }
  return scanner.end();
}

/** Cut points anywhere in a body of `n` bytes (none: the whole body in one chunk). */
const cutsOf = (n: number) =>
  fc
    .uniqueArray(fc.integer({ min: 1, max: Math.max(1, n - 1) }), { maxLength: Math.min(n, 40) })
    .map((c) => c.filter((k) => k < n).sort((a, b) => a - b));

// Keys shorter and longer than the 16 bytes the search samples (quotes included), two sharing those 16.
const KEYS = [
  "usage",
  "total_tokens",
  "output_tokens",
  "0",
  "n",
  "data",
  "cache_read_input_tokens",
  "cache_read_input_tokens_total",
];
const pathArb = fc.array(fc.constantFrom(...KEYS), { minLength: 1, maxLength: 3 });

/** A value at the path: costs, fractions, out of range, not numbers at all. */
const valueArb = fc.oneof(
  fc.nat({ max: 100_000 }),
  fc.double({ min: 0, max: 1e4, noNaN: true }),
  fc.constantFrom(-1, -0.5, 2e9, MAX_UNITS, MAX_UNITS + 0.5, 0, null),
  fc.string({ maxLength: 6 }),
  fc.constant({}),
);

/** A JSON object that holds `value` at `path` (a digit segment sometimes an array's index), among noise. */
function holding(path: readonly string[], value: unknown, noise: Record<string, unknown>): unknown {
  let here: unknown = value;
  for (let i = path.length - 1; i >= 0; i--) {
    const segment = path[i] as string;
    here =
      segment === "0" && i % 2 === 0
        ? [here, noise]
        : { ...noise, [segment]: here, ...(i === 0 && { id: "chatcmpl-é✓" }) };
  }
  return here;
}

const noiseArb = fc.dictionary(
  fc.constantFrom("id", "object", "choices", "pad"),
  fc.jsonValue({ maxDepth: 2 }),
  {
    maxKeys: 2,
  },
);

/** The data of one event: JSON holding a value at the path, JSON without it, or text that is not JSON. */
const dataArb = (path: readonly string[]) =>
  fc.oneof(
    fc.tuple(valueArb, noiseArb).map(([v, noise]) => JSON.stringify(holding(path, v, noise))),
    noiseArb.map((noise) => JSON.stringify(noise)),
    fc.constantFrom("[DONE]", "", `{"${path[path.length - 1]}":`, `${JSON.stringify(path.at(-1))}: 5`),
    fc.string({ maxLength: 20 }),
  );

const EOL = fc.constantFrom("\n", "\r\n", "\r");

/** One event as the stream writes it: fields, its data maybe split over several `data:` lines, and a blank line. */
const eventArb = (path: readonly string[]) =>
  fc
    .record({
      data: dataArb(path),
      splits: fc.array(fc.nat(), { maxLength: 2 }),
      space: fc.boolean(),
      extra: fc.array(
        fc.constantFrom("event: message_delta", ": a comment", "id: 7", "retry: 100", "datum: 3", "data"),
        { maxLength: 2 },
      ),
      eols: fc.array(EOL, { minLength: 6, maxLength: 6 }),
      ends: fc.constantFrom("blank", "blank", "blank", "none"),
    })
    .map(({ data, splits, space, extra, eols, ends }) => {
      const at = [...new Set(splits.map((s) => s % (data.length + 1)))].sort((a, b) => a - b);
      const parts = [0, ...at].map((from, i) => data.slice(from, at[i] ?? data.length));
      const lines = [...extra, ...parts.map((p) => `data:${space ? " " : ""}${p}`)];
      const eol = (i: number) => eols[i % eols.length] as string;
      return lines.map((l, i) => l + eol(i)).join("") + (ends === "blank" ? eol(5) : "");
    });

/** A stream of events, maybe with garbage bytes between or inside them. */
const streamArb = pathArb.chain((path) =>
  fc
    .record({
      events: fc.array(eventArb(path), { maxLength: 8 }),
      garbage: fc.array(fc.tuple(fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 8 })), { maxLength: 3 }),
    })
    .map(({ events, garbage }) => {
      let bytes = new TextEncoder().encode(events.join(""));
      for (const [at, junk] of garbage) {
        const k = at % (bytes.length + 1);
        bytes = new Uint8Array([...bytes.subarray(0, k), ...junk, ...bytes.subarray(k)]);
      }
      return { path, bytes };
    })
    .chain(({ path, bytes }) =>
      fc.record({ path: fc.constant(path), bytes: fc.constant(bytes), cuts: cutsOf(bytes.length) }),
    ),
);

const RUNS = 400;

describe("sse: any chunking of a stream settles what the whole stream states", () => {
  it("the same answer cut anywhere as in one chunk, and the reference's", () => {
    fc.assert(
      fc.property(streamArb, ({ path, bytes, cuts }) => {
        const whole = read("sse", path, bytes, []);
        expect(read("sse", path, bytes, cuts)).toEqual(whole);
        const reference = sseReference(bytes, path);
        if (reference.found === undefined) expect(whole).toHaveProperty("missing");
        else if (costOf(reference.found) === undefined) expect(whole).toHaveProperty("missing");
        else expect(whole).toEqual({ units: costOf(reference.found) });
      }),
      { numRuns: RUNS },
    );
  });

  it("random bytes never throw out of the reader nor settle a cost the bytes do not state", () => {
    const bytesArb = fc
      .uint8Array({ maxLength: 300 })
      .chain((bytes) => fc.record({ bytes: fc.constant(bytes), cuts: cutsOf(bytes.length), path: pathArb }));
    fc.assert(
      fc.property(bytesArb, ({ bytes, cuts, path }) => {
        const found = read("sse", path, bytes, cuts);
        expect(found).toEqual(read("sse", path, bytes, []));
        if ("units" in found) expect(sseReference(bytes, path).stated).toContain(found.units);
      }),
      { numRuns: RUNS },
    );
  });

  it("can fail: the reference tells a stream's last usage from an earlier one", () => {
    // A check of the checks: a reader that kept the first event's value, or dropped a chunk, would differ here.
    const bytes = new TextEncoder().encode(
      'data: {"usage":{"total_tokens":3}}\r\n\r\ndata: {"usage":{"total_tokens":8}}\r\r',
    );
    expect(sseReference(bytes, ["usage", "total_tokens"]).found).toBe(8);
    expect(read("sse", ["usage", "total_tokens"], bytes, [37, 38])).toEqual({ units: 8 });
    expect(read("sse", ["usage", "total_tokens"], bytes.subarray(0, 40), [])).toEqual({ units: 3 });
  });
});

describe("json: any chunking of a body settles what the whole body states", () => {
  it("the same answer cut anywhere as in one chunk, and the number at the path of the whole body", () => {
    const bodyArb = pathArb.chain((path) =>
      fc
        .oneof(
          fc.tuple(valueArb, noiseArb).map(([v, noise]) => JSON.stringify(holding(path, v, noise), null, 1)),
          fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
          fc.string({ maxLength: 40 }),
        )
        .map((text) => new TextEncoder().encode(text))
        .chain((bytes) =>
          fc.record({ path: fc.constant(path), bytes: fc.constant(bytes), cuts: cutsOf(bytes.length) }),
        ),
    );
    fc.assert(
      fc.property(bodyArb, ({ path, bytes, cuts }) => {
        const whole = read("json", path, bytes, []);
        expect(read("json", path, bytes, cuts)).toEqual(whole);
        let parsed: unknown;
        try {
          parsed = JSON.parse(new TextDecoder().decode(bytes));
        } catch {
          expect(whole).toHaveProperty("missing");
          return;
        }
        const cost = costOf(valueAt(parsed, path));
        expect(whole).toEqual(
          cost === undefined ? expect.objectContaining({ missing: expect.any(String) }) : { units: cost },
        );
      }),
      { numRuns: RUNS },
    );
  });

  it("random bytes never throw out of the reader nor settle a cost the bytes do not state", () => {
    const bytesArb = fc
      .uint8Array({ maxLength: 200 })
      .chain((bytes) => fc.record({ bytes: fc.constant(bytes), cuts: cutsOf(bytes.length), path: pathArb }));
    fc.assert(
      fc.property(bytesArb, ({ bytes, cuts, path }) => {
        const found = read("json", path, bytes, cuts);
        expect(found).toEqual(read("json", path, bytes, []));
        if ("units" in found) {
          const cost = costOf(valueAt(JSON.parse(new TextDecoder().decode(bytes)), path));
          expect(found.units).toBe(cost);
        }
      }),
      { numRuns: RUNS },
    );
  });
});
