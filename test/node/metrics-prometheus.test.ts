// `GET /__floodgate/metrics` under Debian's real Prometheus (docs/monitoring.md): two bundled Workers (two
// isolates, each counting on its own) share this file's own redis-server through the local REST server,
// Prometheus scrapes one of them every second, and what it stores adds up to the requests sent, per rule and
// outcome. promtool checks the exposition, the alert rules and their unit tests; the Grafana dashboard's
// queries run against this Prometheus.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Redis as IORedis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, startRedis, startRestServer } from "../../redis-rest/index.mjs";
import { hashIdentity } from "../../src/engine/keys";
import { launchChromium } from "../support/chromium.mjs";
import { startEchoOrigin } from "../support/echo-origin.mjs";
import { type MiniflareWorker, startWorker } from "../support/miniflare-worker.mjs";
import { type PrometheusServer, promtool, startPrometheus } from "./prometheus";

const ADMIN_TOKEN = "metrics-admin-token-0123456789";
const METRICS_TOKEN = "metrics-scrape-token-9876543210";
const API_KEY = "sk_live_metrics_SECRET_4711";
const CLIENT_IP = "198.51.100.23";
const RULES = [
  {
    name: "keyed",
    match: { path: "/keyed/*" },
    key: "header:x-api-key",
    algorithm: "sliding-log",
    limit: 12,
    period: "1h",
  },
  {
    name: "watched",
    match: { path: "/watched/*" },
    key: "ip",
    algorithm: "sliding-log",
    limit: 5,
    period: "1h",
    mode: "monitor",
  },
  {
    name: "paced",
    match: { path: "/paced/*" },
    key: "ip",
    algorithm: "gcra",
    limit: 10,
    period: "1s",
    burst: 1,
    delay: "5s",
  },
];
/** `METRICS_FLUSH_INTERVAL_MS` (src/observability/metrics.ts): an isolate flushes at most this often. */
const FLUSH_INTERVAL_MS = 5000;
const monitoring = (name: string) => fileURLToPath(new URL(`../../monitoring/${name}`, import.meta.url));
/** `FLOODGATE_SCREENSHOTS=1`: also run traffic for a while and save Prometheus's graphs of it under docs/. */
const SCREENSHOTS = Boolean(process.env.FLOODGATE_SCREENSHOTS);
const docs = (name: string) => fileURLToPath(new URL(`../../docs/${name}`, import.meta.url));
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let redis: Awaited<ReturnType<typeof startRedis>>;
let rest: Awaited<ReturnType<typeof startRestServer>>;
let origin: Awaited<ReturnType<typeof startEchoOrigin>>;
let direct: IORedis;
let scraped: MiniflareWorker;
let other: MiniflareWorker;
let port: number;
let prometheus: PrometheusServer | undefined;

beforeAll(async () => {
  // Redis of its own: `INFO commandstats` then counts this file's commands only.
  redis = await startRedis();
  rest = await startRestServer({ redisUrl: redis.url });
  origin = await startEchoOrigin();
  direct = new IORedis(redis.url, { maxRetriesPerRequest: 1 });
  const bindings = bindingsOf(`prom${Date.now()}`);
  port = await freePort();
  [scraped, other] = await Promise.all([startWorker({ bindings, port }), startWorker({ bindings })]);
});

afterAll(async () => {
  await prometheus?.close();
  await Promise.allSettled([scraped?.dispose(), other?.dispose()]);
  direct?.disconnect();
  await Promise.allSettled([rest?.close(), origin?.close()]);
  await redis?.close();
});

/** The Workers' bindings: both tokens, the rules above, their own key prefix. */
const bindingsOf = (prefix: string) => ({
  ORIGIN_URL: origin.url,
  UPSTASH_REDIS_REST_URL: rest.url,
  UPSTASH_REDIS_REST_TOKEN: rest.token,
  RATE_LIMIT_RULES: RULES,
  RATE_LIMIT_PREFIX: prefix,
  RATE_LIMIT_ADMIN_TOKEN: ADMIN_TOKEN,
  RATE_LIMIT_METRICS_TOKEN: METRICS_TOKEN,
  RATE_LIMIT_TIMEOUT_MS: "5000",
});

const scrape = (worker: MiniflareWorker, token: string, accept?: string) =>
  worker.fetch("/__floodgate/metrics", {
    headers: { Authorization: `Bearer ${token}`, ...(accept && { Accept: accept }) },
  });

/** Every command Redis has served since it started, by `INFO commandstats`. */
async function commandsServed(): Promise<number> {
  const info = await direct.info("commandstats");
  let calls = 0;
  for (const match of info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) calls += Number(match[1]);
  return calls;
}

describe("who may scrape", () => {
  it("answers 401 to a wrong or missing token, 200 to the metrics token and to the admin token", async () => {
    expect((await scrape(scraped, "not-the-metrics-token-at-all")).status).toBe(401);
    expect((await scraped.fetch("/__floodgate/metrics")).status).toBe(401);
    const byMetrics = await scrape(scraped, METRICS_TOKEN);
    expect(byMetrics.status).toBe(200);
    expect(byMetrics.headers.get("Content-Type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    await byMetrics.text();
    const byAdmin = await scrape(scraped, ADMIN_TOKEN);
    expect(byAdmin.status).toBe(200);
    await byAdmin.text();
  });

  it("opens no other admin route with the metrics token", async () => {
    const identity = encodeURIComponent(CLIENT_IP);
    const routes: Array<[string, string, unknown?]> = [
      ["GET", "/__floodgate/rules"],
      ["PUT", "/__floodgate/mode", { mode: "off" }],
      ["GET", `/__floodgate/keys/keyed/${identity}`],
      ["DELETE", `/__floodgate/keys/keyed/${identity}`],
      ["PUT", `/__floodgate/overrides/keyed/${identity}`, { limit: 1000 }],
      ["GET", `/__floodgate/overrides/keyed/${identity}`],
      ["DELETE", `/__floodgate/overrides/keyed/${identity}`],
      ["GET", "/__floodgate/overrides/keyed"],
      ["GET", "/__floodgate/dashboard.json"],
      ["GET", "/__floodgate/no-such-route"],
    ];
    // Each from a client of its own: wrong tokens are throttled per client (docs/security.md), and this is
    // not about the throttle.
    for (const [i, [method, path, body]] of routes.entries()) {
      const response = await scraped.fetch(path, {
        method,
        headers: {
          Authorization: `Bearer ${METRICS_TOKEN}`,
          "Content-Type": "application/json",
          "CF-Connecting-IP": `192.0.2.${i + 1}`,
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      expect({ method, path, status: response.status }).toEqual({ method, path, status: 401 });
      await response.text();
    }
    // Signing in to the dashboard with it sets no session either.
    const signIn = await scraped.fetch("/__floodgate/login", {
      method: "POST",
      headers: {
        "Content-Type": "application/x-www-form-urlencoded",
        Origin: "http://floodgate.test",
        "CF-Connecting-IP": "192.0.2.100",
      },
      body: new URLSearchParams({ token: METRICS_TOKEN }).toString(),
      redirect: "manual",
    });
    expect(signIn.headers.get("Set-Cookie")).toBeNull();
    await signIn.text();
  });

  it("with only the metrics token set, serves metrics while the admin API stays off", async () => {
    const worker = await startWorker({
      bindings: { ...bindingsOf(`promonly${Date.now()}`), RATE_LIMIT_ADMIN_TOKEN: "" },
    });
    try {
      const metrics = await scrape(worker, METRICS_TOKEN);
      expect(metrics.status).toBe(200);
      await metrics.text();
      expect((await scrape(worker, "not-the-metrics-token-at-all")).status).toBe(401);
      const rules = await worker.fetch("/__floodgate/rules", {
        headers: { Authorization: `Bearer ${METRICS_TOKEN}` },
      });
      expect(rules.status).toBe(404);
      await rules.text();
    } finally {
      await worker.dispose();
    }
  });

  it("without either token, has no metrics route and spends no Redis command on counting", async () => {
    const prefix = `promnone${Date.now()}`;
    const worker = await startWorker({
      bindings: { ...bindingsOf(prefix), RATE_LIMIT_ADMIN_TOKEN: "", RATE_LIMIT_METRICS_TOKEN: "" },
    });
    try {
      const metrics = await scrape(worker, METRICS_TOKEN);
      expect(metrics.status).toBe(404);
      await metrics.text();
      for (let i = 0; i < 3; i++)
        await (await worker.fetch("/keyed/x", { headers: { "x-api-key": API_KEY } })).text();
      expect(await direct.keys(`${prefix}:metrics*`)).toEqual([]);
    } finally {
      await worker.dispose();
    }
  });

  it("costs a fixed number of Redis commands per scrape, whatever the traffic", async () => {
    const idle = async () => {
      const before = await commandsServed();
      return (await commandsServed()) - before;
    };
    const one = async () => {
      const before = await commandsServed();
      await (await scrape(other, METRICS_TOKEN)).text();
      return (await commandsServed()) - before;
    };
    const baseline = await idle();
    // The first endpoint's pipeline (HGETALL ×3) and each endpoint's PING, INFO, DBSIZE and SCAN.
    expect((await one()) - baseline).toBe(7);
    expect((await one()) - baseline).toBe(7);
  });
});

describe("under Prometheus", () => {
  interface Sent {
    rule: string;
    outcome: string;
  }
  const sent: Sent[] = [];

  beforeAll(async () => {
    prometheus = await startPrometheus(
      [
        "global: { scrape_interval: 1s, evaluation_interval: 1s }",
        `rule_files: [${JSON.stringify(monitoring("alerts.yml"))}]`,
        "scrape_configs:",
        "  - job_name: floodgate",
        "    metrics_path: /__floodgate/metrics",
        `    authorization: { credentials: ${JSON.stringify(METRICS_TOKEN)} }`,
        `    static_configs: [{ targets: ["127.0.0.1:${port}"] }]`,
        "",
      ].join("\n"),
    );
    const startedAt = Date.now();
    const send = async (worker: MiniflareWorker, path: string) => {
      const response = await worker.fetch(path, {
        headers: { "x-api-key": API_KEY, "CF-Connecting-IP": CLIENT_IP },
      });
      await response.text();
      return response;
    };
    // 30 requests under `keyed` (limit 12), 15 through each Worker at once: 12 allowed, 18 denied.
    const keyed = async (worker: MiniflareWorker) => {
      for (let i = 0; i < 15; i++) {
        const { status } = await send(worker, "/keyed/x");
        sent.push({ rule: "keyed", outcome: status === 429 ? "denied" : "allowed" });
      }
    };
    // 10 under `watched` (monitor, limit 5), one after another: 5 allowed, 5 would have been denied.
    const watched = async () => {
      for (let i = 0; i < 10; i++) {
        await send(i % 2 ? scraped : other, "/watched/x");
        sent.push({ rule: "watched", outcome: i < 5 ? "allowed" : "would_deny" });
      }
    };
    // 4 at once under `paced` (10/s, burst 1, delay 5s): the first passes, the others wait for their slot.
    const paced = async () => {
      const responses = await Promise.all([1, 2, 3, 4].map(() => send(other, "/paced/x")));
      for (const r of responses) {
        sent.push({
          rule: "paced",
          outcome: /delay;dur=/.test(r.headers.get("Server-Timing") ?? "") ? "delayed" : "allowed",
        });
      }
    };
    await Promise.all([keyed(scraped), keyed(other), watched(), paced()]);
    // An isolate flushes at most every 5 s, after a response.
    await sleep(Math.max(0, startedAt + FLUSH_INTERVAL_MS + 500 - Date.now()));
  });

  /** A request matching no rule to each Worker: the one that is due flushes what it counted. */
  const nudge = () =>
    Promise.all(
      [scraped, other].map(async (worker) => {
        await (await worker.fetch("/free")).text();
      }),
    );

  it("stores, per rule and outcome, as many decisions as requests were sent", async () => {
    const expected: Record<string, number> = {};
    for (const { rule, outcome } of sent)
      expected[`${rule}/${outcome}`] = (expected[`${rule}/${outcome}`] ?? 0) + 1;
    expect(expected["keyed/allowed"]).toBe(12);
    expect(expected["keyed/denied"]).toBe(18);
    expect(expected["paced/delayed"]).toBeGreaterThan(0);

    const server = prometheus as PrometheusServer;
    let seen: Record<string, number> = {};
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      await nudge();
      seen = {};
      for (const { metric, value } of await server.query(
        "sum by (rule, outcome) (floodgate_decisions_total)",
      )) {
        const count = Number(value[1]);
        if (count > 0) seen[`${metric.rule}/${metric.outcome}`] = count;
      }
      if (JSON.stringify(sorted(seen)) === JSON.stringify(sorted(expected))) break;
      await sleep(500);
    }
    expect(sorted(seen)).toEqual(sorted(expected));
    // Prometheus scraped it as OpenMetrics (its preferred format) without a parse error.
    const targets = (await (await fetch(`${server.url}/api/v1/targets`)).json()) as {
      data: { activeTargets: Array<{ health: string; lastError: string }> };
    };
    expect(targets.data.activeTargets.map((t) => [t.health, t.lastError])).toEqual([["up", ""]]);
    // Both Workers decided from Redis, and their latencies are in the histogram.
    const [count] = await server.query("sum(floodgate_decision_duration_seconds_count)");
    expect(Number(count?.value[1])).toBe(sent.length);
    // One key for the API key, one for the IP (`paced`'s, a bucket of one second, may be gone by now).
    const keys = await server.query("sum by (rule) (floodgate_redis_keys)");
    expect(Object.fromEntries(keys.map((k) => [k.metric.rule, Number(k.value[1])]))).toMatchObject({
      keyed: 1,
      watched: 1,
    });
    const [up] = await server.query("floodgate_redis_up");
    expect(up?.value[1]).toBe("1");
  });

  it("runs every query of the Grafana dashboard", async () => {
    const dashboard = JSON.parse(readFileSync(monitoring("grafana-dashboard.json"), "utf8")) as {
      panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
      templating: { list: Array<{ query: unknown }> };
    };
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr));
    expect(exprs.length).toBeGreaterThanOrEqual(10);
    for (const expr of exprs) {
      // Grafana's variables, as Grafana fills them for a one-hour view.
      const promql = expr
        .replaceAll("$__rate_interval", "1m")
        .replaceAll("$__range", "1h")
        .replaceAll('"$rule"', '".*"');
      const answer = await (prometheus as PrometheusServer).queryRaw(promql);
      expect({ expr, status: answer.status, error: answer.error }).toEqual({
        expr,
        status: "success",
        error: undefined,
      });
    }
  });

  // promtool 2.42 reads the text format only (an OpenMetrics counter's family is named without `_total`, which
  // it takes for a family without HELP); Prometheus's own scrape above parsed the OpenMetrics output.
  it("passes promtool check metrics, and no label carries an identity or a secret, in either format", async () => {
    const secrets = [API_KEY, CLIENT_IP, ADMIN_TOKEN, METRICS_TOKEN, rest.token, rest.url];
    const hashes = [await hashIdentity(API_KEY), await hashIdentity(CLIENT_IP)];
    for (const accept of [undefined, "application/openmetrics-text;version=1.0.0"]) {
      const response = await scrape(scraped, METRICS_TOKEN, accept);
      const body = await response.text();
      expect(body).toContain('floodgate_decisions_total{rule="keyed",outcome="denied",source=');
      for (const value of [...secrets, ...hashes]) expect(body).not.toContain(value);
      if (!accept) {
        const check = await promtool(["check", "metrics"], body);
        expect({ code: check.code, problems: check.stdout + check.stderr }).toEqual({
          code: 0,
          problems: "",
        });
      } else {
        expect(response.headers.get("Content-Type")).toBe(
          "application/openmetrics-text; version=1.0.0; charset=utf-8",
        );
        expect(body.endsWith("# EOF\n")).toBe(true);
      }
    }
  });

  it("has alert rules promtool accepts, whose tests prove the denial-spike and Redis-down alerts fire", async () => {
    const check = await promtool(["check", "rules", monitoring("alerts.yml")]);
    expect({ code: check.code, out: check.stdout + check.stderr }).toMatchObject({ code: 0 });
    const test = await promtool(["test", "rules", monitoring("alerts.test.yml")]);
    expect({ code: test.code, out: test.stdout + test.stderr }).toMatchObject({ code: 0 });
    // Loaded by this Prometheus too.
    const rules = (await (await fetch(`${(prometheus as PrometheusServer).url}/api/v1/rules`)).json()) as {
      data: { groups: Array<{ rules: Array<{ name: string; health: string }> }> };
    };
    const loaded = rules.data.groups.flatMap((g) => g.rules.map((r) => [r.name, r.health]));
    expect(loaded.map(([name]) => name)).toEqual(
      expect.arrayContaining(["FloodgateDenialSpike", "FloodgateRedisDown", "FloodgateBreakerOpen"]),
    );
  });

  // Grafana is not in Debian: the pictures in docs/monitoring.md are Prometheus's own graph page (the classic
  // UI Debian ships) of two of the dashboard's queries, on this traffic.
  it.runIf(SCREENSHOTS)(
    "saves Prometheus's graphs of two dashboard queries on a minute of traffic",
    async () => {
      const until = Date.now() + 60_000;
      for (let i = 0; Date.now() < until; i++) {
        // A new API key every 20 requests: 12 allowed, then 8 denied; the monitor rule past 5 would deny.
        const headers = { "x-api-key": `shot-${Math.floor(i / 20)}`, "CF-Connecting-IP": CLIENT_IP };
        const worker = i % 2 ? scraped : other;
        await Promise.all([
          worker.fetch("/keyed/x", { headers }).then((r) => r.text()),
          i % 3 === 0 ? worker.fetch("/watched/x", { headers }).then((r) => r.text()) : undefined,
        ]);
        await sleep(100);
      }
      await nudge();
      await sleep(3000);
      const browser = await launchChromium();
      try {
        const page = await browser.context.newPage();
        await page.setViewportSize({ width: 1280, height: 720 });
        const shots: Array<[string, string]> = [
          ["monitoring-decisions.png", "sum by (rule, outcome) (rate(floodgate_decisions_total[15s]))"],
          [
            "monitoring-latency.png",
            "histogram_quantile(0.95, sum by (le, source) (rate(floodgate_decision_duration_seconds_bucket[15s])))",
          ],
        ];
        for (const [file, expr] of shots) {
          const query = new URLSearchParams({ "g0.expr": expr, "g0.tab": "0", "g0.range_input": "2m" });
          await page.goto(`${(prometheus as PrometheusServer).url}/graph?${query}`);
          await page.waitForSelector(".graph svg path", { timeout: 15_000 });
          await sleep(500);
          await page.screenshot({ path: docs(file), fullPage: true });
        }
      } finally {
        await browser.close();
      }
    },
    120_000,
  );
});

const sorted = (counts: Record<string, number>) =>
  Object.fromEntries(Object.entries(counts).sort(([a], [b]) => a.localeCompare(b)));
