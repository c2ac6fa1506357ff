/**
 * Part 1, overhead: what a Redis-decided request costs under `workerd serve`, each target in its own
 * workerd process, measured interleaved (a, b, b+, b', c, d, e, then again) so drift on this shared machine
 * hits every target alike; the median of the repetitions is reported. Ratios are to (b'), the bare proxy
 * plus one hand-written EVALSHA fetch: the physical limit of a request decided by Redis over REST.
 */
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { extractBaseline } from "./lib/baseline.mjs";
import { IP_HEADER, startProxyingFloodgate } from "./lib/floodgate.mjs";
import { stopAll } from "./lib/procs.mjs";
import { fmt, median, quantile, table } from "./lib/report.mjs";
import { restCommand, startOrigin, startRedis, startRest } from "./lib/stack.mjs";
import { startWorker } from "./lib/workerd.mjs";
import { ensureWrk, runWrk } from "./lib/wrk.mjs";

/** Generous limits: every request of the throughput runs is allowed and proxied. */
const HUGE_LIMIT = 1_000_000;
const LOAD_HEADERS = { [IP_HEADER]: "203.0.113.7", "x-api-key": "bench-key" };
const DENIED_HEADERS = { [IP_HEADER]: "198.51.100.9", "x-api-key": "bench-key" };

const oneRule = [
  { name: "bench-ip", key: "ip", algorithm: "sliding-window", limit: HUGE_LIMIT, period: "60s" },
];
const threeRules = [
  ...oneRule,
  { name: "bench-key", key: "header:x-api-key", algorithm: "token-bucket", limit: HUGE_LIMIT, period: "60s" },
  { name: "bench-global", key: "global", algorithm: "gcra", limit: HUGE_LIMIT, period: "60s" },
];
/** A wrk script giving every request a new client IP: every identity cold (the lease-less path). */
export const COLD_SCRIPT = `math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
request = function()
  wrk.headers["${IP_HEADER}"] = string.format("10.%d.%d.%d", math.random(0, 255), math.random(0, 255), math.random(1, 254))
  return wrk.format(nil)
end
`;
const deniedRule = [{ name: "bench-denied", key: "ip", algorithm: "fixed-window", limit: 1, period: "1h" }];
/**
 * A penalty box (docs/protect.md): one request a second, and a denial blocks for 15 minutes. Without the
 * block the window would turn every second and each isolate would ask Redis again; blocked, it never does.
 */
const blockedRule = [
  { name: "bench-blocked", key: "ip", algorithm: "fixed-window", limit: 1, period: "1s", block: "15m" },
];

/**
 * Runs the overhead part. `durationS` per target per repetition; `repetitions` interleaved rounds.
 * `only`: target ids to run (default all but the no-origin pair (l), (l+)). `baseline`: a git revision whose Floodgate is measured too, in
 * the same interleaved rounds, as targets `c@<rev>`, `d@<rev>` and `c-denied@<rev>` (its src/ and lua/ are
 * extracted under bench/.baseline/, so it bundles against this checkout's node_modules).
 * Returns `{ markdown, json }`.
 */
export async function runOverhead({
  durationS = 5,
  repetitions = 3,
  warmupS = 1,
  only,
  baseline,
  log = console.error,
} = {}) {
  ensureWrk();
  const redis = await startRedis();
  const rest = await startRest(redis.url);
  const origin = await startOrigin();
  const sha = await restCommand(rest, [
    "SCRIPT",
    "LOAD",
    readFileSync(new URL("workers/fixed-window.lua", import.meta.url), "utf8"),
  ]);
  const common = {
    ORIGIN_URL: origin.url,
    UPSTASH_REDIS_REST_URL: rest.url,
    UPSTASH_REDIS_REST_TOKEN: rest.token,
    LIMIT: String(HUGE_LIMIT),
  };
  const floodgate = (rules, prefix, entry) => ({ rest, origin, rules, prefix, entry });

  /** Each target: how to start it and which identity the load uses. */
  const specs = [
    { id: "a", label: "(a) origin direct", start: async () => origin, headers: LOAD_HEADERS },
    {
      id: "b",
      label: "(b) bare Hono proxy",
      start: () => startWorker("b", "bench/workers/bare-proxy.mjs", common),
    },
    {
      id: "b+",
      label:
        "(b+) bare proxy doing the contract's per-request work (origin timeout, X-Forwarded-*, rate-limit headers)",
      start: () => startWorker("bplus", "bench/workers/contract-proxy.mjs", common),
    },
    {
      id: "b'",
      label: "(b') proxy + one raw EVALSHA fetch",
      start: () => startWorker("bp", "bench/workers/evalsha-proxy.mjs", { ...common, EVALSHA_SHA: sha }),
    },
    {
      id: "c",
      label: "(c) Floodgate, 1 rule, hot identity (leases on, the default)",
      floodgate: floodgate(oneRule, "bench-c"),
    },
    {
      id: "c-off",
      label: "(c) Floodgate, 1 rule, hot identity, `RATE_LIMIT_LEASES=off`",
      floodgate: { ...floodgate(oneRule, "bench-c-off"), bindings: { RATE_LIMIT_LEASES: "off" } },
    },
    {
      id: "c-cold",
      label: "(c) Floodgate, 1 rule, a new identity per request (leases on)",
      floodgate: floodgate(oneRule, "bench-c-cold"),
      cold: true,
    },
    {
      id: "c-cold-off",
      label: "(c) Floodgate, 1 rule, a new identity per request, `RATE_LIMIT_LEASES=off`",
      floodgate: { ...floodgate(oneRule, "bench-c-cold-off"), bindings: { RATE_LIMIT_LEASES: "off" } },
      cold: true,
    },
    { id: "d", label: "(d) Floodgate, 3 rules", floodgate: floodgate(threeRules, "bench-d") },
    {
      id: "e",
      label: "(e) @upstash/ratelimit slidingWindow",
      start: () => startWorker("e", "bench/workers/upstash-ratelimit.mjs", common),
    },
    {
      id: "l",
      label: "(l) no origin: a Hono app answering itself (only with --only)",
      start: () => startWorker("l", "bench/workers/local-answer.mjs", common),
      optional: true,
    },
    {
      id: "l+",
      label: "(l+) the same behind `rateLimit()`, hot identity (only with --only)",
      start: () => startWorker("lplus", "bench/workers/local-limited.mjs", common),
      optional: true,
    },
    {
      id: "c-denied",
      label: "(c) Floodgate, identity already denied",
      floodgate: floodgate(deniedRule, "bench-cd"),
      headers: DENIED_HEADERS,
      denied: true,
    },
    {
      id: "c-blocked",
      label: '(c) Floodgate, identity blocked (`block = "15m"`)',
      floodgate: floodgate(blockedRule, "bench-cb"),
      headers: DENIED_HEADERS,
      denied: true,
    },
  ];

  if (baseline) {
    const entry = `${extractBaseline(baseline)}/src/worker.ts`;
    for (const spec of specs.filter((s) => s.floodgate)) {
      const { prefix } = spec.floodgate;
      specs.push({
        ...spec,
        id: `${spec.id}@${baseline}`,
        of: spec.id,
        label: `${spec.label} @${baseline}`,
        // The same rules and bindings (RATE_LIMIT_LEASES=off stays off), the baseline's Worker.
        floodgate: { ...spec.floodgate, prefix: `${prefix}-base`, entry },
      });
    }
  }

  const targets = [];
  const skipped = [];
  // A baseline's copy of a target runs whenever that target does.
  const chosen = (s) => (only ? only.includes(s.of ?? s.id) : !s.optional);
  for (const spec of specs.filter(chosen)) {
    const headers = spec.headers ?? LOAD_HEADERS;
    if (spec.floodgate) {
      const { worker, skipped: reason } = await startProxyingFloodgate(
        `fg-${spec.id}`,
        spec.floodgate,
        LOAD_HEADERS,
      );
      if (!worker) {
        log(`overhead: skipping ${spec.label}: ${reason}`);
        skipped.push({ ...spec, reason });
        continue;
      }
      if (spec.denied) {
        // Use up the identity's single request; every later one is denied (and answered from the deny cache).
        for (let i = 0; i < 3; i++) await (await fetch(`${worker.url}/`, { headers })).arrayBuffer();
      }
      targets.push({ ...spec, headers, proc: worker });
    } else {
      targets.push({ ...spec, headers, proc: await spec.start() });
    }
  }

  const pidsOf = (target) => ({
    ...(target.proc === origin ? {} : { workerd: target.proc.pid }),
    origin: origin.pid,
    rest: rest.pid,
    redis: redis.pid,
  });
  const runs = Object.fromEntries(targets.map((t) => [t.id, []]));
  const coldScript = join(tmpdir(), `floodgate-bench-cold-${process.pid}.lua`);
  writeFileSync(coldScript, COLD_SCRIPT);
  process.once("exit", () => rmSync(coldScript, { force: true })); // wrk's script, for this run only
  /** Calls per command name Redis has served (INFO commandstats; commands run by scripts included). */
  const commandCalls = async () => {
    const info = String(await restCommand(rest, ["INFO", "commandstats"]));
    const calls = {};
    for (const m of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) calls[m[1]] = Number(m[2]);
    return calls;
  };
  for (const target of targets) {
    await runWrk(`${target.proc.url}/`, { durationS: warmupS, headers: target.headers });
  }
  for (let round = 1; round <= repetitions; round++) {
    for (const target of targets) {
      const before = await commandCalls();
      const result = await runWrk(`${target.proc.url}/`, {
        durationS,
        headers: target.headers,
        pids: pidsOf(target),
        ...(target.cold && { script: coldScript }),
      });
      // Upstash bills EVALSHA plus every command the script runs (docs/algorithms.md, "What a decision
      // costs"); INFO itself excluded.
      const after = await commandCalls();
      let billable = 0;
      for (const [name, n] of Object.entries(after)) if (name !== "info") billable += n - (before[name] ?? 0);
      result.redisCalls =
        (after.evalsha ?? 0) - (before.evalsha ?? 0) + (after.eval ?? 0) - (before.eval ?? 0);
      result.evalshaPerRequest = result.redisCalls / result.requests;
      result.commandsPerRequest = billable / result.requests;
      log(`overhead round ${round} ${target.label}: ${fmt(result.rps)} req/s, non-2xx ${result.non2xx}`);
      runs[target.id].push(result);
      await sleep(200);
    }
  }
  for (const target of targets) if (target.proc !== origin) await target.proc.stop();
  await Promise.all([origin.stop(), rest.stop(), redis.stop()]);
  return summarize(targets, runs, skipped, { durationS, repetitions });
}

function summarize(targets, runs, skipped, { durationS, repetitions }) {
  const rows = targets.map((t) => {
    const r = runs[t.id];
    const cpu = (name, key) => median(r.map((x) => x.cpu[name]?.[key] ?? Number.NaN));
    return {
      id: t.id,
      label: t.label,
      denied: Boolean(t.denied),
      rps: median(r.map((x) => x.rps)),
      rawRps: r.map((x) => x.rps),
      p50Ms: median(r.map((x) => x.p50Ms)),
      p99Ms: median(r.map((x) => x.p99Ms)),
      non2xx: r.reduce((sum, x) => sum + x.non2xx + x.socketErrors, 0),
      requests: r.reduce((sum, x) => sum + x.requests, 0),
      workerdUs: cpu("workerd", "usPerRequest"),
      evalshaPerRequest: median(r.map((x) => x.evalshaPerRequest ?? Number.NaN)),
      redisCalls: r.reduce((sum, x) => sum + (x.redisCalls ?? 0), 0),
      commandsPerRequest: median(r.map((x) => x.commandsPerRequest ?? Number.NaN)),
      workerdPercent: cpu("workerd", "percent"),
      originPercent: cpu("origin", "percent"),
      restPercent: cpu("rest", "percent"),
      redisPercent: cpu("redis", "percent"),
    };
  });
  const byId = Object.fromEntries(rows.map((row) => [row.id, row]));
  const ref = byId["b'"];
  for (const row of rows) {
    row.rpsRatio = ref ? row.rps / ref.rps : Number.NaN;
    // CPU ratio as efficiency: (b')'s µs per request over this target's, so ≥ 1 means cheaper than (b').
    row.cpuRatio = ref && row.id !== "a" ? ref.workerdUs / row.workerdUs : Number.NaN;
  }
  const denied = byId["c-denied"];
  const bare = byId.b;
  const deniedVsBare = denied && bare ? denied.rps / bare.rps : Number.NaN;
  const blocked = byId["c-blocked"];
  const blockedVsBare = blocked && bare ? blocked.rps / bare.rps : Number.NaN;

  const markdown = [
    `Each target ${durationS} s per repetition, ${repetitions} repetitions interleaved, \`wrk -t2 -c32\`, median shown (raw req/s in brackets). ` +
      "workerd CPU is read from /proc over each run; CPU ratio = (b') µs per request ÷ the target's (≥ 1 is cheaper).",
    "",
    table(
      [
        "target",
        "req/s (raw)",
        "p50 ms",
        "p99 ms",
        "workerd CPU µs/req",
        "× (b') req/s",
        "× (b') CPU",
        "non-2xx",
        "Redis calls/req",
        "billable cmds/req",
        "CPU % workerd / origin / REST / redis",
      ],
      rows.map((r) => [
        r.label,
        `${fmt(r.rps)} (${r.rawRps.map((x) => fmt(x)).join(", ")})`,
        fmt(r.p50Ms, 2),
        fmt(r.p99Ms, 2),
        fmt(r.workerdUs),
        fmt(r.rpsRatio, 2),
        fmt(r.cpuRatio, 2),
        r.denied ? `${r.non2xx} (429, expected)` : String(r.non2xx),
        fmt(r.evalshaPerRequest, 3),
        fmt(r.commandsPerRequest, 3),
        [r.workerdPercent, r.originPercent, r.restPercent, r.redisPercent].map((x) => fmt(x)).join(" / "),
      ]),
    ),
    "",
    `Already-denied identity: (c) answers at **${fmt(deniedVsBare, 2)}×** the bare proxy's (b) req/s (goal ≥ 0.90).`,
    ...(blocked
      ? [
          "",
          `Blocked identity: (c) answers at **${fmt(blockedVsBare, 2)}×** the bare proxy's (b) req/s (goal ≥ 0.90), ` +
            `with ${blocked.redisCalls} Redis calls in ${blocked.requests} requests (goal: none).`,
        ]
      : []),
    "",
    goals(byId, deniedVsBare),
    "",
    leaseGoals(byId, runs),
    ...skipped.map((s) => `\nNot measured: ${s.label}: ${s.reason}`),
  ].join("\n");
  return { markdown, json: { durationS, repetitions, rows, deniedVsBare, blockedVsBare, skipped, runs } };
}

/**
 * (c) against (b) round by round: each round runs every target once, one after the other, so the ratio
 * within a round is spared the drift between rounds. Median and interquartile range of those ratios.
 */
function pairedVsBare(runs) {
  const bare = runs.b ?? [];
  const leased = runs.c ?? [];
  const rounds = bare.map((b, i) => [b, leased[i]]).filter(([, c]) => c !== undefined);
  if (rounds.length < 4) return "";
  const spread = (ratios) =>
    `${fmt(median(ratios), 2)}× (quartiles ${fmt(quantile(ratios, 0.25), 2)}–${fmt(quantile(ratios, 0.75), 2)})`;
  const rps = rounds.map(([b, c]) => c.rps / b.rps);
  const cpu = rounds.map(([b, c]) => b.cpu.workerd.usPerRequest / c.cpu.workerd.usPerRequest);
  return ` Round by round, (c) vs (b) over ${rounds.length} rounds: req/s ${spread(rps)}, CPU efficiency ${spread(cpu)}.`;
}

/** The lease goals (docs/leases.md), each checked against this run's medians. */
function leaseGoals(byId, runs) {
  const { b, c } = byId;
  const contract = byId["b+"];
  const cold = byId["c-cold"];
  const coldOff = byId["c-cold-off"];
  const local = byId.l;
  const limited = byId["l+"];
  const noOrigin =
    local && limited
      ? `No origin: \`rateLimit()\` adds ${fmt(limited.workerdUs - local.workerdUs)} µs of workerd CPU per leased request (${fmt(local.workerdUs)} → ${fmt(limited.workerdUs)}).`
      : "";
  if (!b || !c) return noOrigin || "Lease goals: not measured.";
  const vsBare = (x) =>
    `${fmt(x.rps / b.rps, 2)}× req/s, ${fmt(b.workerdUs / x.workerdUs, 2)}× CPU efficiency`;
  const lines = [
    `hot identity with leases: ${fmt(c.evalshaPerRequest, 3)} Redis calls/request (goal ≤ 0.1), ` +
      `${fmt(c.commandsPerRequest, 3)} billable commands/request (goal ≤ 0.3), ${vsBare(c)} of the bare proxy (b) (goal ≥ 0.9 each)` +
      (contract
        ? `; the contract's work alone (b+): ${vsBare(contract)} of (b), and (c) does ${fmt(c.rps / contract.rps, 2)}× its req/s at ${fmt(contract.workerdUs / c.workerdUs, 2)}× its CPU efficiency`
        : ""),
    cold && coldOff
      ? `cold identities: leases on ${fmt(cold.rps)} req/s, ${fmt(cold.workerdUs)} µs CPU, ${fmt(cold.commandsPerRequest, 2)} cmds/req; ` +
        `off ${fmt(coldOff.rps)} req/s, ${fmt(coldOff.workerdUs)} µs CPU, ${fmt(coldOff.commandsPerRequest, 2)} cmds/req`
      : "cold identities: not measured",
  ];
  return `Lease goals: ${lines.join("; ")}.${pairedVsBare(runs)}${noOrigin ? ` ${noOrigin}` : ""}`;
}

/** The issue's goals, each checked against this run's medians. */
function goals(byId, deniedVsBare) {
  const { c, d, e } = byId;
  const check = (ok) => (ok === undefined ? "not measured" : ok ? "met" : "**missed**");
  const ahead = (x) => (x && e ? x.rps > e.rps && x.workerdUs < e.workerdUs : undefined);
  const lines = [
    ["(c) ≥ 0.95× (b') in req/s and CPU", c ? c.rpsRatio >= 0.95 && c.cpuRatio >= 0.95 : undefined],
    ["(d) ≥ 0.90× (b') in req/s and CPU", d ? d.rpsRatio >= 0.9 && d.cpuRatio >= 0.9 : undefined],
    ["(c) and (d) ahead of (e) in req/s and CPU", c && d ? ahead(c) && ahead(d) : undefined],
    [
      "already denied: (c) ≥ 0.90× (b) in req/s",
      Number.isFinite(deniedVsBare) ? deniedVsBare >= 0.9 : undefined,
    ],
  ];
  return `Goals: ${lines.map(([goal, ok]) => `${goal}: ${check(ok)}`).join("; ")}.`;
}

// `node bench/overhead.mjs [--only b',c,d] [--seconds 5] [--repetitions 3] [--baseline main]`: this part
// alone, printed (bench/run.mjs runs it as part of the suite and writes bench/results/).
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      only: { type: "string" },
      seconds: { type: "string", default: "5" },
      repetitions: { type: "string", default: "3" },
      baseline: { type: "string" },
    },
  });
  try {
    const { markdown } = await runOverhead({
      durationS: Number(values.seconds),
      repetitions: Number(values.repetitions),
      only: values.only?.split(",").map((id) => id.trim()),
      baseline: values.baseline,
    });
    console.log(markdown);
  } finally {
    await stopAll();
  }
}
