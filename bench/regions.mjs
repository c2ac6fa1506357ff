#!/usr/bin/env node
/**
 * Regions against none, in the same run (docs/regions.md): a primary behind an added round trip
 * (`redis-rest --rtt`, default 80 ms), two regional databases at about a millisecond (`--region-rtt`, default
 * 1), an origin, and two Workers under `workerd serve` pinned to two regions (RATE_LIMIT_REGION eu / us);
 * against the same two Workers with no regions (the primary decides, isolate leases on). Traffic: `--identities`
 * (10,000) identities whose rates follow a Zipf law (exponent `--zipf`, 1), `--rate` requests a second in all
 * (Poisson arrivals, open loop), each identity at home in one region. The first `--warmup` seconds of a round
 * are not measured. One rule, a sliding window of 1,000 an hour per IP (it never denies here: latency, not
 * limiting, is measured).
 *
 *   node bench/regions.mjs [--rtt 80] [--region-rtt 1] [--identities 10000] [--zipf 1] [--rate 300]
 *                          [--seconds 60] [--warmup 20] [--rounds 2]
 *
 * Reports p50/p90/p99 added latency over the origin alone, overall and by how often an identity sends (every
 * few seconds or more often, every 10-60 s, rarer), Redis calls (EVALSHA/EVAL) per request per database, and
 * billed commands per request per database (INFO commandstats, what Upstash bills). Writes
 * bench/results/regions.md and .json.
 */
import { Agent, request } from "node:http";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { IP_HEADER, startProxyingFloodgate } from "./lib/floodgate.mjs";
import { stopAll } from "./lib/procs.mjs";
import { fmt, machine, quantile, table, writeResults } from "./lib/report.mjs";
import { commandCounts, commandsSince, startOrigin, startRedis, startRest } from "./lib/stack.mjs";

const RULES = JSON.stringify([
  { name: "per-ip", key: "ip", algorithm: "sliding-window", limit: 1000, period: "1h" },
]);
const REGIONS = ["eu", "us"];

/** Cumulative Zipf weights over `n` identities (rank 1 the hottest) and each one's share of the traffic. */
function zipf(n, s) {
  const weights = Array.from({ length: n }, (_, i) => 1 / (i + 1) ** s);
  const total = weights.reduce((a, b) => a + b, 0);
  const cumulative = new Float64Array(n);
  let sum = 0;
  weights.forEach((w, i) => {
    sum += w / total;
    cumulative[i] = sum;
  });
  return { cumulative, share: weights.map((w) => w / total) };
}

/** The identity a uniform `u` picks (binary search of the cumulative weights). */
function pick(cumulative, u) {
  let lo = 0;
  let hi = cumulative.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cumulative[mid] < u) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** How often an identity sends, by its mean interval in seconds. */
const classOf = (intervalS) => (intervalS <= 10 ? "≤ 10 s" : intervalS <= 60 ? "10-60 s" : "> 60 s");
const CLASSES = ["≤ 10 s", "10-60 s", "> 60 s"];

/**
 * Open loop for `seconds`: Poisson arrivals at `rate` a second, each an identity drawn by Zipf, sent to its
 * home region's Worker (`workers[i % 2]`) with its own IP. Resolves to the latencies after `warmupS`, by class.
 */
async function drive(workers, { rate, seconds, warmupS, cumulative, intervals, ipOf, agent }) {
  const latencies = Object.fromEntries(["all", ...CLASSES].map((c) => [c, []]));
  const statuses = {};
  let sent = 0; // every request, the warm-up's too: the commands counted over the round are theirs
  const started = performance.now();
  const endAt = started + seconds * 1000;
  const measureFrom = started + warmupS * 1000;
  const inFlight = new Set();
  const send = (identity) => {
    const { hostname, port } = new URL(workers[identity % workers.length].url);
    const sentAt = performance.now();
    const pending = new Promise((resolve) => {
      const req = request(
        { hostname, port, path: "/", agent, headers: { [IP_HEADER]: ipOf(identity) } },
        (res) => {
          res.resume();
          res.on("end", () => {
            if (sentAt >= measureFrom) {
              const ms = performance.now() - sentAt;
              latencies.all.push(ms);
              latencies[classOf(intervals[identity])].push(ms);
              statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
            }
            resolve();
          });
        },
      );
      req.on("error", () => {
        if (sentAt >= measureFrom) statuses.error = (statuses.error ?? 0) + 1;
        resolve();
      });
      req.end();
    });
    inFlight.add(pending);
    void pending.then(() => inFlight.delete(pending));
  };
  let at = started;
  while (at < endAt) {
    at += (-Math.log(1 - Math.random()) / rate) * 1000;
    const wait = at - performance.now();
    if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
    send(pick(cumulative, Math.random()));
    sent++;
  }
  await Promise.all(inFlight);
  return { latencies, statuses, sent };
}

export async function runRegions({
  rttMs = 80,
  regionRttMs = 1,
  identities = 10_000,
  zipfS = 1,
  rate = 300,
  seconds = 60,
  warmupS = 20,
  rounds = 2,
} = {}) {
  const { cumulative, share } = zipf(identities, zipfS);
  const intervals = share.map((p) => 1 / (p * rate)); // s between an identity's requests, on average
  const databases = { primary: await startRedis(), eu: await startRedis(), us: await startRedis() };
  const rests = {
    primary: await startRest(databases.primary.url, { rttMs }),
    eu: await startRest(databases.eu.url, { rttMs: regionRttMs }),
    us: await startRest(databases.us.url, { rttMs: regionRttMs }),
  };
  const origin = await startOrigin();
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const started = [];
  const targets = [
    { name: "regions", regions: true },
    { name: "none", regions: false },
  ];
  try {
    for (const target of targets) {
      target.workers = [];
      for (const region of REGIONS) {
        const bindings = target.regions
          ? {
              RATE_LIMIT_REGIONS: JSON.stringify({ eu: ["EU", "AF"], us: ["NA", "SA"] }),
              UPSTASH_REDIS_REST_URL_EU: rests.eu.url,
              UPSTASH_REDIS_REST_TOKEN_EU: rests.eu.token,
              UPSTASH_REDIS_REST_URL_US: rests.us.url,
              UPSTASH_REDIS_REST_TOKEN_US: rests.us.token,
              RATE_LIMIT_REGION: region,
            }
          : {};
        const { worker, skipped } = await startProxyingFloodgate(
          `${target.name}-${region}`,
          { rest: rests.primary, origin, rules: RULES, prefix: `reg-${target.name}`, bindings },
          { [IP_HEADER]: "192.0.2.250" },
        );
        if (skipped) throw new Error(`${target.name}-${region}: ${skipped}`);
        target.workers.push(worker);
        started.push(worker);
      }
    }
    const samples = Object.fromEntries(
      targets.map((t) => [t.name, Object.fromEntries(["all", ...CLASSES].map((c) => [c, []]))]),
    );
    const statuses = Object.fromEntries(targets.map((t) => [t.name, {}]));
    const spent = Object.fromEntries(
      targets.map((t) => [t.name, Object.fromEntries(Object.keys(rests).map((db) => [db, {}]))]),
    );
    const requests = Object.fromEntries(targets.map((t) => [t.name, 0])); // measured
    const sentAll = Object.fromEntries(targets.map((t) => [t.name, 0])); // every request of the rounds
    const originSamples = [];
    for (let round = 0; round < rounds; round++) {
      for (const target of round % 2 === 0 ? targets : [...targets].reverse()) {
        const before = Object.fromEntries(
          await Promise.all(Object.entries(rests).map(async ([db, rest]) => [db, await commandCounts(rest)])),
        );
        // Identities new to this round's target: each round starts as a population new to the deployment.
        const t = targets.indexOf(target);
        const ipOf = (i) => `10.${(round * 2 + t) % 250}.${Math.floor(i / 250)}.${(i % 250) + 1}`;
        const run = await drive(target.workers, {
          rate,
          seconds,
          warmupS,
          cumulative,
          intervals,
          ipOf,
          agent,
        });
        // The requests' background work (deposits, renewals) is theirs too.
        await new Promise((resolve) => setTimeout(resolve, 2 * rttMs + 500));
        for (const [db, rest] of Object.entries(rests)) {
          const diff = commandsSince(await commandCounts(rest), before[db]);
          for (const [name, n] of Object.entries(diff))
            spent[target.name][db][name] = (spent[target.name][db][name] ?? 0) + n;
        }
        for (const c of ["all", ...CLASSES]) samples[target.name][c].push(...run.latencies[c]);
        requests[target.name] += run.latencies.all.length;
        sentAll[target.name] += run.sent;
        for (const [status, n] of Object.entries(run.statuses))
          statuses[target.name][status] = (statuses[target.name][status] ?? 0) + n;
        console.error(
          `round ${round + 1}, ${target.name}: ${run.latencies.all.length} requests, p50 ${fmt(quantile(run.latencies.all, 0.5), 1)} p90 ${fmt(quantile(run.latencies.all, 0.9), 1)} p99 ${fmt(quantile(run.latencies.all, 0.99), 1)} ms`,
        );
      }
      // The origin alone: what every target's latency is "added" over.
      const direct = await drive([origin], {
        rate,
        seconds: 10,
        warmupS: 1,
        cumulative,
        intervals,
        ipOf: () => "192.0.2.1",
        agent,
      });
      originSamples.push(...direct.latencies.all);
    }
    const originP50 = quantile(originSamples, 0.5);
    const added = (values, q) => fmt(Math.max(0, quantile(values, q) - originP50), 1);
    const latencyRows = targets.flatMap((t) =>
      ["all", ...CLASSES].map((c) => {
        const s = samples[t.name][c];
        const share = fmt((100 * s.length) / Math.max(1, samples[t.name].all.length), 0);
        return [
          t.name,
          c === "all" ? "all" : `every ${c}`,
          `${fmt(s.length)} (${share} %)`,
          added(s, 0.5),
          added(s, 0.9),
          added(s, 0.99),
        ];
      }),
    );
    const perRequest = (t, db, filter) => {
      const n = Object.entries(spent[t][db])
        .filter(([name]) => filter(name))
        .reduce((a, [, v]) => a + v, 0);
      return fmt(n / Math.max(1, sentAll[t]), 3);
    };
    const calls = (name) => name === "evalsha" || name === "eval";
    const commandRows = targets.map((t) => [
      t.name,
      ...Object.keys(rests).map(
        (db) => `${perRequest(t.name, db, calls)} / ${perRequest(t.name, db, () => true)}`,
      ),
    ]);
    const byCommand = targets
      .map(
        (t) =>
          `${t.name}: ${Object.keys(rests)
            .map(
              (db) =>
                `${db} ${
                  Object.entries(spent[t.name][db])
                    .sort((a, b) => b[1] - a[1])
                    .map(([name, n]) => `${name} ${fmt(n / Math.max(1, sentAll[t.name]), 3)}`)
                    .join(", ") || "none"
                }`,
            )
            .join("; ")}`,
      )
      .join(". ");
    const statusLine = targets
      .map(
        (t) =>
          `${t.name}: ${Object.entries(statuses[t.name])
            .map(([s, n]) => `${fmt(n)} × ${s}`)
            .join(", ")}`,
      )
      .join("; ");
    const markdown = [
      `${fmt(identities)} identities, Zipf rates (exponent ${zipfS}), ${rate} requests/s in all (Poisson, open loop), each identity at home in one of two regions (two Workers under \`workerd serve\`, RATE_LIMIT_REGION eu / us); ${seconds} s per round, the first ${warmupS} s not measured, ${rounds} rounds per target, interleaved. Primary behind an added ${rttMs} ms round trip, regional databases ${regionRttMs} ms. One rule: sliding-window, 1,000 per hour per IP. "none": the same two Workers with no regions (isolate leases on). Added latency = at the client, less the origin alone's p50 (${fmt(originP50, 1)} ms), ms.`,
      "",
      table(["target", "identities sending", "requests (share)", "p50", "p90", "p99"], latencyRows),
      "",
      "Per request (every request of the rounds, the warm-up's included, as the commands are), by database: Redis calls (EVALSHA + EVAL) / billed commands (every command, INFO commandstats; the requests' background work included):",
      "",
      table(["target", ...Object.keys(rests)], commandRows),
      "",
      `By command, per request: ${byCommand}.`,
      "",
      `Statuses: ${statusLine}.`,
      "",
      machine(),
    ].join("\n");
    const json = {
      rttMs,
      regionRttMs,
      identities,
      zipfS,
      rate,
      seconds,
      warmupS,
      rounds,
      origin: { p50: originP50 },
      targets: Object.fromEntries(
        targets.map((t) => [
          t.name,
          {
            requests: requests[t.name],
            sent: sentAll[t.name],
            added: Object.fromEntries(
              ["all", ...CLASSES].map((c) => [
                c,
                Object.fromEntries(
                  [0.5, 0.9, 0.99].map((q) => [`p${q * 100}`, quantile(samples[t.name][c], q) - originP50]),
                ),
              ]),
            ),
            commands: spent[t.name],
            statuses: statuses[t.name],
          },
        ]),
      ),
    };
    return { markdown, json };
  } finally {
    agent.destroy();
    await Promise.all(started.map((w) => w.stop()));
    await origin.stop();
    for (const rest of Object.values(rests)) await rest.stop();
    for (const db of Object.values(databases)) await db.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      rtt: { type: "string", default: "80" },
      "region-rtt": { type: "string", default: "1" },
      identities: { type: "string", default: "10000" },
      zipf: { type: "string", default: "1" },
      rate: { type: "string", default: "300" },
      seconds: { type: "string", default: "60" },
      warmup: { type: "string", default: "20" },
      rounds: { type: "string", default: "2" },
      out: { type: "string", default: "regions" },
    },
  });
  try {
    const { markdown, json } = await runRegions({
      rttMs: Number(values.rtt),
      regionRttMs: Number(values["region-rtt"]),
      identities: Number(values.identities),
      zipfS: Number(values.zipf),
      rate: Number(values.rate),
      seconds: Number(values.seconds),
      warmupS: Number(values.warmup),
      rounds: Number(values.rounds),
    });
    writeResults(values.out, `## Regions against none\n\n${markdown}`, json);
    console.log(markdown);
  } finally {
    await stopAll();
  }
}
