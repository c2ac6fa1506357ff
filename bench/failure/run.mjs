/**
 * What a Redis failure costs the proxy: requests/s and latency of Floodgate under `workerd serve` with Redis
 * healthy, then killed (the REST server answers 503 at once), then frozen with SIGSTOP (every call would
 * hang until the decision budget), in one run, interleaved: healthy, killed, healthy, frozen, … Goal
 * (docs/failure-modes.md): a dead Redis costs < 10% throughput and no p99 spike once the breaker is open.
 *
 *   node bench/failure/run.mjs [--seconds 5] [--rounds 3] [--connections 32]
 *
 * Each failure phase first sends traffic for `--settle` seconds (default 2, not recorded) so the breaker
 * has opened; the recorded window then includes the breaker's periodic probes (one request per cool-down
 * pays the budget). Prints a markdown table; writes bench/results/failure.md and .json. Not part of `npm test`.
 */
import { parseArgs } from "node:util";
import { startRedis as startControllableRedis } from "../../redis-rest/index.mjs";
import { IP_HEADER, startProxyingFloodgate } from "../lib/floodgate.mjs";
import { stopAll } from "../lib/procs.mjs";
import { fmt, machine, median, table, writeResults } from "../lib/report.mjs";
import { startOrigin, startRest } from "../lib/stack.mjs";
import { ensureWrk, runWrk } from "../lib/wrk.mjs";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "5" },
    settle: { type: "string", default: "2" },
    rounds: { type: "string", default: "3" },
    connections: { type: "string", default: "32" },
  },
});
const durationS = Number(values.seconds);
const settleS = Math.max(1, Math.round(Number(values.settle))); // wrk takes whole seconds
const rounds = Number(values.rounds);
const connections = Number(values.connections);
const timeoutMs = 200;

ensureWrk();
const redis = await startControllableRedis();
let worker;
try {
  const rest = await startRest(redis.url);
  const origin = await startOrigin();
  // One rule every request matches, with a limit no run reaches: every request is proxied, so the
  // phases differ only in where the decision came from (Redis, or the breaker + local fallback).
  const rules = [
    { name: "bench-failure", key: "ip", algorithm: "sliding-window", limit: 1_000_000_000, period: "1m" },
  ];
  const headers = { [IP_HEADER]: "203.0.113.7" };
  const started = await startProxyingFloodgate(
    "floodgate-failure",
    {
      rest,
      origin,
      rules,
      prefix: `bench-failure-${Date.now()}`,
      bindings: { RATE_LIMIT_TIMEOUT_MS: String(timeoutMs), RATE_LIMIT_FAILURE: "open" },
    },
    headers,
  );
  if (!started.worker) throw new Error(`Floodgate does not proxy yet: ${started.skipped}`);
  worker = started.worker;
  const pids = { workerd: worker.pid, redis: redis.pid(), rest: rest.pid, origin: origin.pid };
  const load = (seconds) => runWrk(`${worker.url}/bench`, { durationS: seconds, connections, headers, pids });

  /** @type {Record<string, Array<Awaited<ReturnType<typeof runWrk>>>>} */
  const runs = { healthy: [], killed: [], frozen: [] };
  await load(1); // warm-up: JIT, connections, the script in Redis's cache
  for (let round = 0; round < rounds; round++) {
    for (const failure of ["killed", "frozen"]) {
      runs.healthy.push(await load(durationS));
      if (failure === "killed") await redis.kill();
      else redis.stop();
      await load(settleS);
      runs[failure].push(await load(durationS));
      if (failure === "killed") await redis.restart();
      else redis.cont();
      await load(settleS); // the breaker closes again after its cool-down
    }
  }

  const summary = Object.fromEntries(
    Object.entries(runs).map(([name, list]) => [
      name,
      {
        rps: median(list.map((r) => r.rps)),
        p50Ms: median(list.map((r) => r.p50Ms)),
        p99Ms: median(list.map((r) => r.p99Ms)),
        non2xx: list.reduce((sum, r) => sum + r.non2xx + r.socketErrors, 0),
        workerdUsPerRequest: median(list.map((r) => r.cpu.workerd?.usPerRequest ?? Number.NaN)),
        raw: list.map((r) => r.rps),
      },
    ]),
  );
  const healthy = summary.healthy;
  const rows = Object.entries(summary).map(([name, s]) => [
    name === "healthy"
      ? "Redis healthy"
      : name === "killed"
        ? "Redis killed (breaker open)"
        : "Redis frozen, SIGSTOP (breaker open)",
    `${fmt(s.rps)} (${s.raw.map((v) => fmt(v)).join(", ")})`,
    fmt(s.rps / healthy.rps, 2),
    fmt(s.p50Ms, 2),
    fmt(s.p99Ms, 2),
    String(s.non2xx),
    fmt(s.workerdUsPerRequest),
  ]);
  const markdown = [
    `Floodgate under \`workerd serve\`, ${connections} connections, ${durationS} s per run, ${rounds} round(s) interleaved, median; decision budget ${timeoutMs} ms; failure = open.`,
    "",
    table(
      [
        "Redis",
        "req/s median (raw)",
        "vs healthy",
        "p50 ms",
        "p99 ms",
        "non-2xx + socket errors",
        "workerd µs/req",
      ],
      rows,
    ),
    "",
    machine(),
  ].join("\n");
  console.log(markdown);
  writeResults("failure", markdown, { durationS, rounds, connections, timeoutMs, summary, runs });
} finally {
  await worker?.stop();
  await stopAll();
  await redis.close();
}
