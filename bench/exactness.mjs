/**
 * Part 2, exactness across instances: separate `workerd serve` processes (separate isolates, separate
 * deny caches) share one Redis through the REST server, and many connections hammer them at once for ONE
 * identity with a limit of N. Every admitted request is a 200 from the origin; the goal is exactly N for
 * every algorithm, i.e. zero over-admission. Then the same with Redis unreachable, where the local
 * fallback limiter is all that bounds fail-open traffic: per isolate, so up to instances × N by design.
 */
import { IP_HEADER, startProxyingFloodgate } from "./lib/floodgate.mjs";
import { freePort } from "./lib/procs.mjs";
import { fmt, table } from "./lib/report.mjs";
import { startOrigin, startRedis, startRest } from "./lib/stack.mjs";
import { startWorker } from "./lib/workerd.mjs";

const ALGORITHMS = ["fixed-window", "sliding-window", "sliding-log", "token-bucket", "gcra"];
/** Long enough that no window ends and no token refills while the test runs (seconds). */
const PERIOD = "30d";

/**
 * Sends `total` requests, at most `concurrency` in flight, round-robin over `urls`; counts statuses,
 * overall and per instance.
 */
export async function hammer(urls, { total, concurrency, headers }) {
  const statuses = {};
  /** Admitted requests whose decision did not come from Redis (`Server-Timing` desc), by reason. */
  const degraded = {};
  const admittedPerInstance = urls.map(() => 0);
  let leased = 0;
  let next = 0;
  const worker = async () => {
    while (next < total) {
      const i = next++;
      const instance = i % urls.length;
      let status;
      try {
        const response = await fetch(urls[instance], { headers });
        await response.arrayBuffer();
        status = String(response.status);
        const reason = /desc="([^"]+)"/.exec(response.headers.get("server-timing") ?? "")?.[1];
        // A lease is Redis's decision made ahead of time (docs/leases.md), not a degraded one.
        if (reason === "lease" && response.status === 200) leased++;
        else if (reason && response.status === 200) degraded[reason] = (degraded[reason] ?? 0) + 1;
      } catch {
        status = "error";
      }
      statuses[status] = (statuses[status] ?? 0) + 1;
      if (status === "200") admittedPerInstance[instance]++;
    }
  };
  const startedAt = Date.now();
  await Promise.all(Array.from({ length: concurrency }, worker));
  return {
    statuses,
    degraded,
    admitted: statuses["200"] ?? 0,
    leased,
    admittedPerInstance,
    elapsedMs: Date.now() - startedAt,
  };
}

const rulesFor = (limit) =>
  ALGORITHMS.map((algorithm) => ({
    name: `exact-${algorithm}`,
    match: { path: `/${algorithm}/*` },
    key: "ip",
    algorithm,
    limit,
    period: PERIOD,
  }));

/** Admissions Redis itself decided, and whether they stayed within N (the fallback row has none). */
function byRedis(row) {
  const degraded = Object.values(row.degraded).reduce((sum, n) => sum + n, 0);
  const decided = row.admitted - degraded;
  return row.bound ? "–" : `${decided} (${decided <= row.limit ? "yes" : "**no**"})`;
}

/** A few sequential requests to each path of each worker, from an identity no measurement uses. */
async function warm(workers, paths) {
  for (const worker of workers) {
    for (const path of paths) {
      for (let i = 0; i < 3; i++) {
        const response = await fetch(`${worker.url}${path}`, { headers: { [IP_HEADER]: "192.0.2.254" } });
        await response.arrayBuffer();
      }
    }
  }
}

/** Starts `count` instances with `start(i)`; resolves to the workers or `{ skipped }`. */
async function startInstances(count, start) {
  const workers = [];
  for (let i = 0; i < count; i++) {
    const { worker, skipped } = await start(i);
    if (!worker) {
      await Promise.all(workers.map((w) => w.stop()));
      return { skipped };
    }
    workers.push(worker);
  }
  return { workers };
}

/**
 * Runs the exactness part: `instances` workerd processes, limit `limit`, `offeredFactor` × limit requests
 * per algorithm with `concurrency` in flight. Returns `{ markdown, json }`.
 */
export async function runExactness({
  instances = 2,
  limit = 300,
  offeredFactor = 3,
  concurrency = 64,
  log = console.error,
} = {}) {
  const redis = await startRedis();
  const rest = await startRest(redis.url);
  const origin = await startOrigin();
  const total = limit * offeredFactor;
  const probeHeaders = { [IP_HEADER]: "192.0.2.250" };
  const rows = [];
  const notes = [];
  const record = (label, expected, result) => {
    const over = result.admitted - expected;
    rows.push({ label, limit, expected, offered: total, ...result, over });
    log(`exactness ${label}: admitted ${result.admitted} of ${total} (expected ${expected})`);
  };

  // Floodgate, Redis reachable: every algorithm, a fresh identity each; once with the default failure
  // policy (open: a decision that overruns the 200 ms budget is admitted, bounded only by the per-isolate
  // fallback limiter) and once fail-closed (an overrun is a 503, never an admission).
  const policies = [
    { label: "", bindings: {} },
    { label: ", `RATE_LIMIT_FAILURE=closed`", bindings: { RATE_LIMIT_FAILURE: "closed" } },
    // Leases on and off side by side, with a budget this shared machine does not overrun, so that every
    // admission is Redis's (now or by lease) and over/under-admission is the limiter's alone.
    { label: ", budget 2000 ms (leases on)", bindings: { RATE_LIMIT_TIMEOUT_MS: "2000" } },
    {
      label: ", budget 2000 ms, `RATE_LIMIT_LEASES=off`",
      bindings: { RATE_LIMIT_TIMEOUT_MS: "2000", RATE_LIMIT_LEASES: "off" },
    },
  ];
  let floodgate = {};
  for (const [p, policy] of policies.entries()) {
    floodgate = await startInstances(instances, (i) =>
      startProxyingFloodgate(
        `exact-${p}-${i}`,
        { rest, origin, rules: rulesFor(limit), prefix: `bench-exact-${p}`, bindings: policy.bindings },
        probeHeaders,
      ),
    );
    if (!floodgate.workers) break;
    // Warm every isolate on every path (another identity), so that cold starts are not what is measured.
    await warm(
      floodgate.workers,
      ALGORITHMS.map((algorithm) => `/${algorithm}/x`),
    );
    for (const [n, algorithm] of ALGORITHMS.entries()) {
      const urls = floodgate.workers.map((w) => `${w.url}/${algorithm}/x`);
      const headers = { [IP_HEADER]: `192.0.${2 + p}.${n + 1}` };
      const result = await hammer(urls, { total, concurrency, headers });
      record(`Floodgate ${algorithm}${policy.label}`, limit, result);
    }
    await Promise.all(floodgate.workers.map((w) => w.stop()));
  }
  if (!floodgate.workers) notes.push(`Floodgate not measured: ${floodgate.skipped}`);

  // For comparison: @upstash/ratelimit's sliding window, also one atomic script per request.
  const upstash = await startInstances(instances, async (i) => ({
    worker: await startWorker(`exact-e-${i}`, "bench/workers/upstash-ratelimit.mjs", {
      ORIGIN_URL: origin.url,
      UPSTASH_REDIS_REST_URL: rest.url,
      UPSTASH_REDIS_REST_TOKEN: rest.token,
      LIMIT: String(limit),
      WINDOW: "30 d",
      PREFIX: "bench-exact-e",
    }),
  }));
  await warm(upstash.workers, ["/x"]);
  const upstashResult = await hammer(
    upstash.workers.map((w) => `${w.url}/x`),
    { total, concurrency, headers: { [IP_HEADER]: "192.0.2.100" } },
  );
  record("@upstash/ratelimit slidingWindow", limit, upstashResult);
  await Promise.all(upstash.workers.map((w) => w.stop()));

  // Redis unreachable (nothing listens on the REST port): fail-open, bounded by the fallback limiter.
  const deadRest = { url: `http://127.0.0.1:${await freePort()}`, token: "unreachable" };
  const fallback = await startInstances(instances, async (i) => {
    try {
      return {
        worker: await startWorker(`exact-fallback-${i}`, "src/worker.ts", {
          ORIGIN_URL: origin.url,
          UPSTASH_REDIS_REST_URL: deadRest.url,
          UPSTASH_REDIS_REST_TOKEN: deadRest.token,
          RATE_LIMIT_RULES: JSON.stringify(rulesFor(limit)),
          RATE_LIMIT_PREFIX: "bench-exact-fallback",
        }),
      };
    } catch (error) {
      return { skipped: error.message.split("\n")[0] };
    }
  });
  if (fallback.workers && floodgate.workers) {
    await warm(fallback.workers, ["/sliding-window/x"]);
    const urls = fallback.workers.map((w) => `${w.url}/sliding-window/x`);
    const result = await hammer(urls, { total, concurrency, headers: { [IP_HEADER]: "192.0.2.200" } });
    record("Floodgate, Redis down (fallback limiter, fail-open)", limit, result);
    rows.at(-1).bound = instances * limit;
    await Promise.all(fallback.workers.map((w) => w.stop()));
  } else {
    notes.push(`Fallback not measured: ${fallback.skipped ?? floodgate.skipped}`);
  }
  await Promise.all([origin.stop(), rest.stop(), redis.stop()]);

  const markdown = [
    `${instances} separate \`workerd serve\` processes, one shared Redis (through the REST server), one identity, ` +
      `limit N = ${limit} per ${PERIOD}, ${total} requests offered with ${concurrency} in flight, round-robin over the instances.`,
    "",
    table(
      [
        "limiter",
        "N",
        "offered",
        "admitted (per instance)",
        "over-admitted",
        "under-admitted",
        "decided from leases",
        "statuses",
        "admitted without Redis",
        "admitted by Redis (≤ N?)",
        "time ms",
      ],
      rows.map((r) => [
        r.label,
        String(r.limit),
        String(r.offered),
        `**${r.admitted}** (${r.admittedPerInstance.join(" + ")})`,
        r.bound ? `${r.over} (design bound: ≤ ${r.bound - r.limit})` : String(r.over),
        r.bound || r.over >= 0 ? "0" : `${-r.over} (${fmt((-100 * r.over) / r.limit, 1)} %)`,
        String(r.leased ?? 0),
        Object.entries(r.statuses)
          .map(([status, count]) => `${status}×${count}`)
          .join(", "),
        Object.entries(r.degraded)
          .map(([reason, count]) => `${reason}×${count}`)
          .join(", ") || "0",
        byRedis(r),
        String(r.elapsedMs),
      ]),
    ),
    "",
    "_admitted without Redis_: 200s whose `Server-Timing` names a degraded source (a decision that overran the " +
      "200 ms budget, or an open breaker), admitted by the fail-open policy through the per-isolate fallback " +
      "limiter. A decision that timed out may still have been counted in Redis, so not every such admission is " +
      "an over-admission. With `RATE_LIMIT_FAILURE=closed` an overrun is a 503 instead, and only Redis admits.",
    ...notes.map((note) => `\n${note}`),
  ].join("\n");
  return { markdown, json: { instances, limit, total, concurrency, rows, notes } };
}
