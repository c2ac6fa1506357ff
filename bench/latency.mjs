#!/usr/bin/env node
/**
 * What a faraway database costs a request: Floodgate under `workerd serve`, its REST server behind an added
 * round trip (`redis-rest --rtt`), many clients each sending a request now and then (open loop: a client
 * sends on its own schedule, whether or not its last answer came back), latency measured at the client.
 * Targets, interleaved round by round in the same run:
 *
 *   --scenario admin (default), each client one identity:
 *     admin-off   Floodgate, no RATE_LIMIT_ADMIN_TOKEN
 *     admin-on    the same with the admin token (dashboard counts, live modes, override index, metrics totals)
 *   --scenario cold, each request from an identity never seen before:
 *     leases-on   Floodgate, RATE_LIMIT_LEASES=on (the default)
 *     leases-off  the same with RATE_LIMIT_LEASES=off
 *   --scenario async, each client one identity:
 *     exact       Floodgate, wrangler.toml's rules as they are
 *     async       the same rules with `sync = "async"` where a rule can be (docs/going-global.md, "Async rules")
 *     mode-off    the same Worker with RATE_LIMIT_MODE=off: the proxy alone, what "added" is measured over
 *   and always the origin alone, no Worker: what every other target's latency is "added" over
 *
 *   node bench/latency.mjs [--rtt 100] [--clients 40] [--interval-ms 600] [--seconds 30] [--rounds 2]
 *                          [--baseline main]   also both targets at another revision, in the same rounds
 *
 * The rules are wrangler.toml's (what `npm start` runs), each client its own IP. Besides latency, the Redis
 * commands the whole run's decisions cost per request (INFO commandstats, what Upstash bills), by command.
 * Writes bench/results/latency.md and .json; docs/going-global.md explains the numbers.
 */
import { readFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { parse } from "smol-toml";
import { extractBaseline } from "./lib/baseline.mjs";
import { IP_HEADER, startFloodgate, startProxyingFloodgate } from "./lib/floodgate.mjs";
import { stopAll } from "./lib/procs.mjs";
import { fmt, machine, quantile, table, writeResults } from "./lib/report.mjs";
import { commandCounts, commandsSince, startOrigin, startRedis, startRest } from "./lib/stack.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));

/**
 * Sends requests to `url` from `clients` clients, each every `intervalMs` starting at a random phase, for
 * `seconds`; resolves to the latencies (ms) of the requests sent after `warmupS`, and their statuses.
 * `ipOf(i, n)` is client i's address for its n-th request (one identity per client, or a new one each time).
 */
export async function openLoop(url, { clients, intervalMs, seconds, warmupS = 3, ipOf, agent }) {
  const { hostname, port, pathname } = new URL(url);
  const latencies = [];
  const statuses = {};
  /** Server-Timing of the slowest requests (the decision's own duration and why it was not the usual one). */
  const slow = [];
  const started = performance.now();
  const endAt = started + seconds * 1000;
  const measureFrom = started + warmupS * 1000;
  const inFlight = new Set();
  const send = (ip) =>
    new Promise((resolve) => {
      const sentAt = performance.now();
      const req = request({ hostname, port, path: pathname, agent, headers: { [IP_HEADER]: ip } }, (res) => {
        res.resume();
        res.on("end", () => {
          if (sentAt >= measureFrom) {
            const ms = performance.now() - sentAt;
            latencies.push(ms);
            slow.push([ms, `${res.statusCode} ${res.headers["server-timing"] ?? ""}`]);
            if (slow.length > 400) slow.sort((a, b) => b[0] - a[0]).splice(200);
            statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
          }
          resolve();
        });
      });
      req.on("error", () => {
        if (sentAt >= measureFrom) statuses.error = (statuses.error ?? 0) + 1;
        resolve();
      });
      req.end();
    });
  await Promise.all(
    Array.from({ length: clients }, async (_, i) => {
      let at = started + Math.random() * intervalMs;
      for (let n = 0; at < endAt; n++) {
        const wait = at - performance.now();
        if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
        const pending = send(ipOf(i, n));
        inFlight.add(pending);
        void pending.then(() => inFlight.delete(pending));
        at += intervalMs;
      }
    }),
  );
  await Promise.all(inFlight);
  slow.sort((a, b) => b[0] - a[0]).splice(20);
  return { latencies, statuses, slow };
}

/** wrangler.toml's rules, what `npm start` runs. */
function wranglerRules() {
  const wrangler = parse(readFileSync(`${root}wrangler.toml`, "utf8"));
  return JSON.stringify(wrangler.vars.RATE_LIMIT_RULES);
}

/** `rules` (JSON) with `sync = "async"` on every rule that can be: a window or bucket without delay. */
function asyncRules(rules) {
  const counting = new Set(["fixed-window", "sliding-window", "token-bucket", "gcra"]);
  return JSON.stringify(
    JSON.parse(rules).map((rule) =>
      counting.has(rule.algorithm) && rule.delay === undefined ? { ...rule, sync: "async" } : rule,
    ),
  );
}

/** Runs the latency bench; resolves to `{ markdown, json }`. */
export async function runLatency({
  rttMs = 100,
  clients = 40,
  intervalMs = 600,
  seconds = 30,
  rounds = 2,
  bindings = {},
  baseline,
  coldStarts = 6,
  scenario = "admin",
} = {}) {
  const redis = await startRedis();
  const rest = await startRest(redis.url, { rttMs });
  const origin = await startOrigin();
  const rules = wranglerRules();
  const agent = new Agent({ keepAlive: true, maxSockets: clients * 2 });
  const revisions = [{ suffix: "", entry: "src/worker.ts" }];
  if (baseline)
    revisions.push({ suffix: `@${baseline}`, entry: `${extractBaseline(baseline)}/src/worker.ts` });
  const fresh = scenario === "cold";
  const variants =
    scenario === "cold"
      ? [
          { name: "leases-on", bindings: { RATE_LIMIT_LEASES: "on" } },
          { name: "leases-off", bindings: { RATE_LIMIT_LEASES: "off" } },
        ]
      : scenario === "async"
        ? [
            { name: "exact", bindings: {} },
            { name: "async", bindings: { RATE_LIMIT_RULES: asyncRules(rules) } },
            // The same Worker limiting nothing: what the proxy itself costs on this machine, to subtract.
            { name: "mode-off", bindings: { RATE_LIMIT_MODE: "off" } },
          ]
        : [
            { name: "admin-off", bindings: {} },
            { name: "admin-on", bindings: { RATE_LIMIT_ADMIN_TOKEN: "bench-admin-token-0123456789abcdef" } },
          ];
  const targets = revisions.flatMap(({ suffix, entry }) =>
    variants.map((v) => ({ name: `${v.name}${suffix}`, entry, bindings: v.bindings })),
  );
  const started = [];
  try {
    for (const target of targets) {
      const { worker, skipped } = await startProxyingFloodgate(
        target.name,
        {
          rest,
          origin,
          rules,
          prefix: `lat-${target.name.replace(/[^A-Za-z0-9-]/g, "_")}`,
          entry: target.entry,
          bindings: { ...bindings, ...target.bindings },
        },
        { [IP_HEADER]: "192.0.2.250" },
      );
      if (skipped) throw new Error(`${target.name}: ${skipped}`);
      target.worker = worker;
      started.push(worker);
    }
    const samples = Object.fromEntries([...targets.map((t) => t.name), "origin"].map((n) => [n, []]));
    const statuses = Object.fromEntries(targets.map((t) => [t.name, {}]));
    const commands = Object.fromEntries(targets.map((t) => [t.name, {}]));
    const requests = Object.fromEntries(targets.map((t) => [t.name, 0]));
    for (let round = 0; round < rounds; round++) {
      // Interleaved, the order flipped every round: drift between rounds hits both targets alike.
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      for (const target of order) {
        const before = await commandCounts(rest);
        // Fresh identities every round: each round starts as a client population new to the isolate.
        const ipOf = fresh
          ? (i, n) => `10.${(round * 8 + targets.indexOf(target)) % 250}.${n % 250}.${i + 1}` // new each request
          : (i) => `10.${round}.${targets.indexOf(target)}.${i + 1}`;
        const run = await openLoop(target.worker.url, { clients, intervalMs, seconds, ipOf, agent });
        // The background work the requests left (flushes, refreshes) is theirs too.
        await new Promise((resolve) => setTimeout(resolve, 2 * rttMs + 500));
        const spent = commandsSince(await commandCounts(rest), before);
        samples[target.name].push(...run.latencies);
        requests[target.name] += run.latencies.length;
        for (const [status, n] of Object.entries(run.statuses))
          statuses[target.name][status] = (statuses[target.name][status] ?? 0) + n;
        for (const [name, n] of Object.entries(spent))
          commands[target.name][name] = (commands[target.name][name] ?? 0) + n;
        console.error(
          `round ${round + 1}, ${target.name}: ${run.latencies.length} requests, p50 ${fmt(quantile(run.latencies, 0.5))} p99 ${fmt(quantile(run.latencies, 0.99))} ms`,
        );
        if (process.env.FLOODGATE_BENCH_SLOW)
          for (const [ms, timing] of run.slow.slice(0, 8)) console.error(`  ${fmt(ms)} ms: ${timing}`);
      }
      const direct = await openLoop(origin.url, {
        clients,
        intervalMs,
        seconds: Math.min(seconds, 10),
        ipOf: () => "192.0.2.1",
        agent,
      });
      samples.origin.push(...direct.latencies);
    }
    // A fresh isolate's first request, as every new isolate of a deployment serves one: workerd started anew
    // (ready once its health endpoint answers, which reads no live mode), then one request.
    const cold = Object.fromEntries(targets.map((t) => [t.name, []]));
    for (let i = 0; i < coldStarts; i++) {
      for (const target of i % 2 === 0 ? targets : [...targets].reverse()) {
        const worker = await startFloodgate(`${target.name}-cold`, {
          rest,
          origin,
          rules,
          prefix: `lat-${target.name.replace(/[^A-Za-z0-9-]/g, "_")}`,
          entry: target.entry,
          bindings: { ...bindings, ...target.bindings },
        });
        try {
          const sentAt = performance.now();
          const response = await fetch(`${worker.url}/`, { headers: { [IP_HEADER]: `10.200.${i}.1` } });
          await response.arrayBuffer();
          cold[target.name].push(performance.now() - sentAt);
        } finally {
          await worker.stop();
        }
      }
    }
    const originP50 = quantile(samples.origin, 0.5);
    const rows = targets.map((t) => {
      const s = samples[t.name];
      const perRequest = (n) => fmt(n / Math.max(1, requests[t.name]), 2);
      const total = Object.values(commands[t.name]).reduce((a, b) => a + b, 0);
      const byCommand = Object.entries(commands[t.name])
        .sort((a, b) => b[1] - a[1])
        .map(([name, n]) => `${name} ${perRequest(n)}`)
        .join(", ");
      return [
        t.name,
        fmt(s.length),
        `${fmt(quantile(cold[t.name], 0.5), 0)} (${fmt(Math.max(...cold[t.name]), 0)})`,
        ...[0.5, 0.9, 0.99].map((q) => fmt(quantile(s, q), 1)),
        fmt(Math.max(...s), 0),
        perRequest(total),
        byCommand,
      ];
    });
    const statusLine = targets
      .map(
        (t) =>
          `${t.name}: ${Object.entries(statuses[t.name])
            .map(([status, n]) => `${fmt(n)} × ${status}`)
            .join(", ")}`,
      )
      .join("; ");
    const markdown = [
      `${clients} clients, ${fresh ? "each request from an IP never seen before" : "each its own IP"}, sending a request every ${intervalMs} ms (open loop), for ${seconds} s × ${rounds} rounds per target, interleaved; the REST server behind an added ${rttMs} ms round trip (\`redis-rest --rtt ${rttMs}\`); wrangler.toml's rules. Latency at the client, ms (the origin alone: p50 ${fmt(originP50, 1)} ms). Commands: Redis commands per request (INFO commandstats, the requests' background work included). A fresh isolate's first request: ${coldStarts} workerd processes started anew per target, one request each.`,
      "",
      table(
        [
          "target",
          "requests",
          "fresh isolate's first request: median (max)",
          "p50",
          "p90",
          "p99",
          "max",
          "commands / request",
          "by command",
        ],
        rows,
      ),
      "",
      `Statuses: ${statusLine}.`,
      "",
      machine(),
    ].join("\n");
    const json = {
      rttMs,
      clients,
      intervalMs,
      seconds,
      rounds,
      origin: { p50: originP50 },
      targets: Object.fromEntries(
        targets.map((t) => [
          t.name,
          {
            requests: requests[t.name],
            p50: quantile(samples[t.name], 0.5),
            p90: quantile(samples[t.name], 0.9),
            p99: quantile(samples[t.name], 0.99),
            coldFirst: cold[t.name],
            statuses: statuses[t.name],
            commands: commands[t.name],
          },
        ]),
      ),
    };
    return { markdown, json };
  } finally {
    agent.destroy();
    await Promise.all(started.map((w) => w.stop()));
    await origin.stop();
    await rest.stop();
    await redis.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      rtt: { type: "string", default: "100" },
      clients: { type: "string", default: "40" },
      "interval-ms": { type: "string", default: "600" },
      seconds: { type: "string", default: "30" },
      rounds: { type: "string", default: "2" },
      "cold-starts": { type: "string", default: "6" },
      scenario: { type: "string", default: "admin" },
      leases: { type: "string" },
      baseline: { type: "string" },
      out: { type: "string" },
    },
  });
  try {
    const { markdown, json } = await runLatency({
      rttMs: Number(values.rtt),
      clients: Number(values.clients),
      intervalMs: Number(values["interval-ms"]),
      seconds: Number(values.seconds),
      rounds: Number(values.rounds),
      bindings: values.leases ? { RATE_LIMIT_LEASES: values.leases } : {},
      baseline: values.baseline,
      coldStarts: Number(values["cold-starts"]),
      scenario: values.scenario,
    });
    writeResults(
      values.out ?? (values.scenario === "admin" ? "latency" : `latency-${values.scenario}`),
      `## Latency behind a faraway database (${values.scenario})\n\n${markdown}`,
      json,
    );
    console.log(markdown);
  } finally {
    await stopAll();
  }
}
