/**
 * Live lists (docs/lists.md), side by side in one run under `workerd serve`: what a request matched against a
 * 100,000-entry list costs in workerd CPU next to one matched against a 10-entry list. Two Floodgate
 * processes, each with a deny rule reading its own list, same prefix lengths in both lists (/32 and /24: the
 * lookup's cost depends on how many lengths a list mixes, src/rules/ip-set.ts); each list written through the
 * admin API and waited for. Measured interleaved (small, large, small, large, …) so drift hits both; median.
 *
 *   hit:  the client IP is in the list: the deny rule answers 403 (no Redis, no origin): the request is
 *         almost nothing but the match, so a difference shows
 *   miss: the client IP is not: the request goes on and is proxied (no counting rule)
 *
 * Before it, the lookup alone (the isolate's copy of a list, src/live/lists.ts's IP set), in this process's V8
 * (the engine workerd runs): ns per lookup of a listed and an unlisted address, 10 vs 100,000 entries.
 *
 * Last, what one edit costs: a PATCH adding one entry and removing one of a 100,000-entry list held by two
 * Floodgate processes (A takes
 * the write, B learns of it from its once-a-second read of the live modes), this checkout next to `--baseline`
 * (default main), edits interleaved: ms until the new entry is refused in A and in B, the Redis commands and
 * bytes Redis sent per edit (INFO commandstats / stats: the write and every isolate's read of it), and workerd
 * CPU ms per edit in A and B.
 *
 *   node bench/lists.mjs [--duration 5] [--rounds 5] [--edits 10] [--baseline main] [--edits-only]
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { startFloodgate } from "./lib/floodgate.mjs";
import { extractBaseline } from "./lib/baseline.mjs";
import { cpuSeconds, stopAll } from "./lib/procs.mjs";
import { fmt, median, table } from "./lib/report.mjs";
import { restCommand, startOrigin, startRedis, startRest } from "./lib/stack.mjs";
import { ensureWrk, runWrk } from "./lib/wrk.mjs";

const { values: args } = parseArgs({
  options: {
    duration: { type: "string", default: "5" },
    rounds: { type: "string", default: "5" },
    edits: { type: "string", default: "10" },
    baseline: { type: "string", default: "main" },
    "edits-only": { type: "boolean", default: false },
  },
});
const durationS = Number(args.duration);
const rounds = Number(args.rounds);
const TOKEN = "bench-lists-admin-token-0123456789abcdef";

/** `n` entries: all but a hundredth /32 addresses in 100.64.0.0/10, the rest /24 networks in 10.0.0.0/8. */
function entriesOf(n) {
  const networks = Math.max(2, Math.floor(n / 100));
  const entries = [];
  for (let i = 0; i < n - networks; i++) entries.push(`100.${64 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`);
  for (let i = 0; i < networks; i++) entries.push(`10.${(i >> 8) & 255}.${i & 255}.0/24`);
  return entries;
}

const RULES = [{ name: "incident", action: "deny", match: { list: "incident" } }];
const HIT = { "CF-Connecting-IP": "100.64.0.5" }; // in both lists (an address entry)
const MISS = { "CF-Connecting-IP": "198.51.100.7" }; // in neither

/** The IP set and address parser of this checkout, bundled and imported. */
async function ipSetModule() {
  const bundle = await build({
    stdin: {
      contents: `export { IpSet } from "./src/rules/ip-set.ts";
export { addressBits, parsePrefix } from "./src/util/address.ts";`,
      resolveDir: join(dirname(fileURLToPath(import.meta.url)), ".."),
      loader: "ts",
    },
    bundle: true,
    format: "esm",
    platform: "neutral",
    write: false,
    logLevel: "silent",
  });
  return import(`data:text/javascript;base64,${Buffer.from(bundle.outputFiles[0].text).toString("base64")}`);
}

/** ns per lookup, 10 vs 100,000 entries, for a listed and an unlisted address; interleaved, median of rounds. */
async function lookupAlone() {
  const { IpSet, addressBits, parsePrefix } = await ipSetModule();
  const sets = [10, 100_000].map((n) => {
    const set = new IpSet();
    for (const entry of entriesOf(n)) set.add(parsePrefix(entry), 0);
    return set;
  });
  const addresses = { listed: addressBits("100.64.0.5"), unlisted: addressBits("198.51.100.7") };
  const iterations = 1_000_000;
  const rows = [];
  for (const [kind, address] of Object.entries(addresses)) {
    const ns = [[], []];
    for (let round = 0; round < 9; round++) {
      sets.forEach((set, i) => {
        let held = 0;
        const startedAt = process.hrtime.bigint();
        for (let j = 0; j < iterations; j++) if (set.has(address, 0)) held++;
        ns[i].push(Number(process.hrtime.bigint() - startedAt) / iterations);
        if (held !== (kind === "listed" ? iterations : 0)) throw new Error("the lookup answered wrong");
      });
    }
    rows.push([kind, fmt(median(ns[0]), 1), fmt(median(ns[1]), 1)]);
  }
  console.log(table(["address", "ns per lookup, 10 entries", "100,000 entries"], rows));
}

/** Redis's commands served so far (INFO's own left out) and bytes it sent. */
async function redisCounters(rest) {
  const stats = String(await restCommand(rest, ["INFO", "commandstats"]));
  let commands = 0;
  for (const [, name, calls] of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (name !== "info") commands += Number(calls);
  }
  const bytes = Number(
    /total_net_output_bytes:(\d+)/.exec(String(await restCommand(rest, ["INFO", "stats"])))?.[1],
  );
  return { commands, bytes };
}

/** Polls until `url` refuses `ip` (403); ms from `since`. */
async function refusedWithin(url, ip, since) {
  while ((await fetch(url, { headers: { "CF-Connecting-IP": ip } })).status !== 403) {
    if (Date.now() - since > 30_000) throw new Error(`${url}: ${ip} never refused`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return Date.now() - since;
}

/** Small edits of a 100,000-entry list held by two processes, this checkout and the baseline's, interleaved. */
async function editCost(rest, origin) {
  const revisions = [
    { name: "this checkout", entry: "src/worker.ts" },
    { name: `@${args.baseline}`, entry: `${extractBaseline(args.baseline)}/src/worker.ts` },
  ];
  const targets = [];
  for (const [i, revision] of revisions.entries()) {
    const options = {
      rest,
      origin,
      rules: RULES,
      prefix: `bench-edits-${i}-${Date.now()}`,
      entry: revision.entry,
      bindings: { RATE_LIMIT_ADMIN_TOKEN: TOKEN },
    };
    const a = await startFloodgate(`edits-${i}-a`, options);
    const b = await startFloodgate(`edits-${i}-b`, options);
    const put = await fetch(`${a.url}/__floodgate/lists/incident`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
      body: JSON.stringify({ entries: entriesOf(100_000) }),
    });
    if (put.status !== 200) throw new Error(`PUT answered ${put.status}: ${await put.text()}`);
    const since = Date.now();
    await refusedWithin(`${a.url}/x`, HIT["CF-Connecting-IP"], since);
    await refusedWithin(`${b.url}/x`, HIT["CF-Connecting-IP"], since);
    targets.push({ ...revision, a, b, samples: [] });
  }
  const edits = Number(args.edits);
  for (let n = 0; n < edits; n++) {
    for (const target of n % 2 === 0 ? targets : [...targets].reverse()) {
      const ip = `203.0.113.${n + 1}`;
      await new Promise((resolve) => setTimeout(resolve, 1500)); // the last edit's reads all done
      const before = {
        ...(await redisCounters(rest)),
        a: cpuSeconds(target.a.pid),
        b: cpuSeconds(target.b.pid),
      };
      const sentAt = Date.now();
      const patch = await fetch(`${target.a.url}/__floodgate/lists/incident`, {
        method: "PATCH",
        headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
        // One in, one out: the list stays at 100,000, the most it may hold.
        body: JSON.stringify({ add: [ip], remove: [`100.64.1.${n + 1}`] }),
      });
      if (patch.status !== 200) throw new Error(`PATCH answered ${patch.status}: ${await patch.text()}`);
      const [inA, inB] = await Promise.all([
        refusedWithin(`${target.a.url}/x`, ip, sentAt),
        refusedWithin(`${target.b.url}/x`, ip, sentAt),
      ]);
      await new Promise((resolve) => setTimeout(resolve, 1500)); // B's read ends with its swap; A's too
      const after = {
        ...(await redisCounters(rest)),
        a: cpuSeconds(target.a.pid),
        b: cpuSeconds(target.b.pid),
      };
      target.samples.push({
        inA,
        inB,
        commands: after.commands - before.commands,
        bytes: after.bytes - before.bytes,
        cpuA: (after.a - before.a) * 1000,
        cpuB: (after.b - before.b) * 1000,
      });
      console.error(
        `edit ${n + 1} ${target.name}: in A ${inA} ms, in B ${inB} ms, ${after.commands - before.commands} commands, ${fmt((after.bytes - before.bytes) / 1024)} KiB`,
      );
    }
  }
  const rows = targets.map((t) => {
    const m = (key) => median(t.samples.map((s) => s[key]));
    return [
      t.name,
      fmt(m("inA")),
      fmt(m("inB")),
      fmt(m("commands")),
      fmt(m("bytes") / 1024, 1),
      fmt(m("cpuA"), 1),
      fmt(m("cpuB"), 1),
    ];
  });
  console.log(
    table(
      [
        "revision",
        "ms until refused in A",
        "in B",
        "Redis commands / edit",
        "KiB Redis sent / edit",
        "workerd CPU ms / edit, A",
        "B",
      ],
      rows,
    ),
  );
  console.log(
    `\n${edits} PATCHes (one entry in, one out) of a 100,000-entry list per revision, interleaved, median; CPU includes A's and B's requests polling for the refusal (every 5 ms).`,
  );
}

if (!args["edits-only"]) {
  await lookupAlone();
  console.log();
}

ensureWrk();
const redis = await startRedis();
const rest = await startRest(redis.url);
const origin = await startOrigin();
try {
  if (args["edits-only"]) await editCost(rest, origin);
  else {
    const targets = [];
    for (const [name, size] of [
      ["10 entries", 10],
      ["100,000 entries", 100_000],
    ]) {
      const proc = await startFloodgate(`lists-${size}`, {
        rest,
        origin,
        rules: RULES,
        prefix: `bench-lists-${size}`,
        bindings: { RATE_LIMIT_ADMIN_TOKEN: TOKEN },
      });
      const startedAt = Date.now();
      const put = await fetch(`${proc.url}/__floodgate/lists/incident`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
        body: JSON.stringify({ entries: entriesOf(size) }),
      });
      if (put.status !== 200) throw new Error(`PUT answered ${put.status}: ${await put.text()}`);
      const putMs = Date.now() - startedAt;
      // Held once a listed client is refused.
      while ((await fetch(`${proc.url}/x`, { headers: HIT })).status !== 403) {
        if (Date.now() - startedAt > 60_000) throw new Error(`${name}: the list never arrived`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const heldMs = Date.now() - startedAt;
      targets.push({ name, proc, putMs, heldMs });
      console.error(`${name}: written in ${putMs} ms, refusing within ${heldMs} ms`);
    }

    const samples = new Map();
    for (const target of targets) {
      for (const kind of ["hit", "miss"]) samples.set(`${target.name} ${kind}`, []);
    }
    for (let round = 0; round < rounds; round++) {
      for (const kind of ["hit", "miss"]) {
        for (const target of round % 2 === 0 ? targets : [...targets].reverse()) {
          const headers = kind === "hit" ? HIT : MISS;
          const result = await runWrk(`${target.proc.url}/x`, {
            durationS,
            headers,
            pids: { workerd: target.proc.pid },
          });
          samples.get(`${target.name} ${kind}`).push(result);
          console.error(
            `round ${round + 1} ${target.name} ${kind}: ${fmt(result.rps)} req/s, ${fmt(result.cpu.workerd.usPerRequest)} µs CPU`,
          );
        }
      }
    }

    const rows = [];
    for (const kind of ["hit", "miss"]) {
      const [small, large] = targets.map((t) => samples.get(`${t.name} ${kind}`));
      const cpu = (runs) => median(runs.map((r) => r.cpu.workerd.usPerRequest));
      const rps = (runs) => median(runs.map((r) => r.rps));
      const statuses = (runs) =>
        runs.every((r) => r.non2xx === 0) ? "2xx" : kind === "hit" ? "403" : "mixed";
      rows.push([
        kind,
        `${fmt(rps(small))} / ${fmt(rps(large))}`,
        `${fmt(cpu(small))} / ${fmt(cpu(large))}`,
        fmt(cpu(large) - cpu(small)),
        `${statuses(small)} / ${statuses(large)}`,
      ]);
    }
    console.log(
      table(
        [
          "request",
          "req/s 10 / 100,000",
          "workerd CPU µs/req 10 / 100,000",
          "Δ CPU µs (100,000 − 10)",
          "answers",
        ],
        rows,
      ),
    );
    console.log(
      `\nwrk -t2 -c32, ${durationS} s × ${rounds} interleaved rounds, median. 100,000 entries written in ${targets[1]?.putMs} ms, held by the isolate ${targets[1]?.heldMs} ms after the PUT began.`,
    );
    console.log();
    await editCost(rest, origin);
  }
} finally {
  await stopAll();
}
