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
 *   node bench/lists.mjs [--duration 5] [--rounds 5]
 */
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { startFloodgate } from "./lib/floodgate.mjs";
import { stopAll } from "./lib/procs.mjs";
import { fmt, median, table } from "./lib/report.mjs";
import { startOrigin, startRedis, startRest } from "./lib/stack.mjs";
import { ensureWrk, runWrk } from "./lib/wrk.mjs";

const { values: args } = parseArgs({
  options: {
    duration: { type: "string", default: "5" },
    rounds: { type: "string", default: "5" },
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

await lookupAlone();
console.log();

ensureWrk();
const redis = await startRedis();
const rest = await startRest(redis.url);
const origin = await startOrigin();
try {
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
    const statuses = (runs) => (runs.every((r) => r.non2xx === 0) ? "2xx" : kind === "hit" ? "403" : "mixed");
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
} finally {
  await stopAll();
}
