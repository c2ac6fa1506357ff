/**
 * Renders what one scrape read (`MetricsSnapshot`) as Prometheus text exposition 0.0.4, or OpenMetrics 1.0
 * when the scraper asks for it (docs/monitoring.md lists the families). Labels carry rule names, outcomes,
 * sources, error kinds, endpoint indexes and breaker states only: never an identity, an IP, a URL or a secret.
 */
import type { BreakerState } from "../resilience/breaker";
import {
  actionLabels,
  BREAKER_OPENS_FIELD,
  decisionsField,
  ERROR_KINDS,
  errorsField,
  LATENCY_BUCKETS_SECONDS,
  latencyField,
  latencySumField,
  OUTCOMES,
  SOURCES,
} from "./families";

/** One Redis endpoint as the scrape saw it. */
export interface EndpointSnapshot {
  /** It answered PING within the scrape's budget. */
  up: boolean;
  /** `INFO memory`'s `used_memory`, bytes. */
  usedMemoryBytes?: number;
  /** `INFO memory`'s `maxmemory`, bytes (0 = no limit). */
  maxMemoryBytes?: number;
  /** Keys per rule: exact when one SCAN saw every key, else an estimate from its sample (docs/monitoring.md). */
  keysByRule?: ReadonlyMap<string, number>;
  /** This isolate's circuit breaker for the endpoint. */
  breaker: BreakerState;
}

/** What one scrape knows. */
export interface MetricsSnapshot {
  /** The configured rules' names: only they (and `actions`) appear in labels. */
  rules: readonly string[];
  /** The `deny` rules' names: counted `denied` / `would_deny` from `deny_cache` only (families.ts). */
  actions?: readonly string[];
  /** The all-time totals hash (families.ts), or `undefined` when it could not be read. */
  totals?: ReadonlyMap<string, number>;
  /** Lease units outstanding over the isolates that flushed lately (undefined: leases off or unread). */
  leasedUnits?: number;
  endpoints: readonly EndpointSnapshot[];
}

/** The media types answered. */
export const TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8";
export const OPENMETRICS_FORMAT = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/** Whether an `Accept` header asks for OpenMetrics (any version Prometheus sends). */
export const wantsOpenMetrics = (accept: string | undefined): boolean =>
  accept !== undefined && /application\/openmetrics-text/i.test(accept);

type Labels = Readonly<Record<string, string>>;
type Sample = { suffix?: string; labels?: Labels; value: number };

const BREAKER_STATES: readonly BreakerState[] = ["closed", "half-open", "open"];

/** The exposition of `snapshot`; `openMetrics` selects OpenMetrics 1.0 (counter family names lose `_total`, `# EOF` ends it). */
export function renderMetrics(snapshot: MetricsSnapshot, openMetrics: boolean): string {
  const out: string[] = [];
  const family = (
    name: string,
    type: "counter" | "gauge" | "histogram",
    help: string,
    samples: readonly Sample[],
  ) => {
    // OpenMetrics names a counter's family without the `_total` its samples carry.
    const familyName = openMetrics && type === "counter" ? name.replace(/_total$/, "") : name;
    out.push(`# HELP ${familyName} ${help}`, `# TYPE ${familyName} ${type}`);
    // Sample names are the same in both formats (a counter's carry `_total`).
    for (const s of samples) out.push(`${name}${s.suffix ?? ""}${labelText(s.labels)} ${number(s.value)}`);
  };

  const { totals, rules } = snapshot;
  if (totals) {
    family(
      "floodgate_decisions_total",
      "counter",
      "Rule decisions, by rule, outcome and where the answer came from (all isolates, all time).",
      decisionSamples(totals, rules, snapshot.actions ?? []),
    );
    family(
      "floodgate_decision_duration_seconds",
      "histogram",
      "Time to decide a request, by where its answer came from.",
      latencySamples(totals),
    );
    family(
      "floodgate_redis_errors_total",
      "counter",
      "Decisions Redis could not answer, by kind (timeout, unavailable, auth, script).",
      ERROR_KINDS.map((kind) => ({ labels: { kind }, value: totals.get(errorsField(kind)) ?? 0 })),
    );
    family(
      "floodgate_breaker_opens_total",
      "counter",
      "Times an isolate's circuit breaker opened (all isolates, all time).",
      [{ value: totals.get(BREAKER_OPENS_FIELD) ?? 0 }],
    );
  }
  const endpoint = (i: number) => ({ endpoint: String(i) });
  family(
    "floodgate_redis_up",
    "gauge",
    "Whether the Redis endpoint answered PING at this scrape.",
    snapshot.endpoints.map((e, i) => ({ labels: endpoint(i), value: e.up ? 1 : 0 })),
  );
  family(
    "floodgate_breaker_state",
    "gauge",
    "The scraped isolate's circuit breaker per endpoint: 1 for its current state.",
    snapshot.endpoints.flatMap((e, i) =>
      BREAKER_STATES.map((state) => ({
        labels: { ...endpoint(i), state },
        value: e.breaker === state ? 1 : 0,
      })),
    ),
  );
  const measured = snapshot.endpoints.flatMap((e, i) => (e.usedMemoryBytes === undefined ? [] : [{ e, i }]));
  family(
    "floodgate_redis_memory_used_bytes",
    "gauge",
    "Redis used_memory (INFO memory) at this scrape.",
    measured.map(({ e, i }) => ({ labels: endpoint(i), value: e.usedMemoryBytes ?? 0 })),
  );
  family(
    "floodgate_redis_memory_max_bytes",
    "gauge",
    "Redis maxmemory (INFO memory); 0 when it has no limit.",
    measured.map(({ e, i }) => ({ labels: endpoint(i), value: e.maxMemoryBytes ?? 0 })),
  );
  family(
    "floodgate_redis_keys",
    "gauge",
    "Redis keys holding each rule's state: exact below about 1000 keys, an estimate from one SCAN sample above.",
    snapshot.endpoints.flatMap((e, i) =>
      e.keysByRule === undefined
        ? []
        : rules.map((rule) => ({ labels: { ...endpoint(i), rule }, value: e.keysByRule?.get(rule) ?? 0 })),
    ),
  );
  if (snapshot.leasedUnits !== undefined) {
    family(
      "floodgate_lease_units_outstanding",
      "gauge",
      "Units isolates hold on lease and have not spent, as they last flushed them.",
      [{ value: snapshot.leasedUnits }],
    );
  }
  if (openMetrics) out.push("# EOF");
  return `${out.join("\n")}\n`;
}

/**
 * Every counted (rule, outcome, source), and zeros for each rule's `allowed` and `denied` from Redis and each
 * deny rule's `denied` from the deny cache (so rates start at once).
 */
function decisionSamples(
  totals: ReadonlyMap<string, number>,
  rules: readonly string[],
  actions: readonly string[],
): Sample[] {
  const samples: Sample[] = [];
  for (const rule of actions) {
    for (const verdict of ["denied", "would-deny"] as const) {
      const labels = actionLabels(verdict);
      const value = totals.get(decisionsField(rule, labels.outcome, labels.source));
      if (value !== undefined || verdict === "denied")
        samples.push({ labels: { rule, ...labels }, value: value ?? 0 });
    }
  }
  for (const rule of rules) {
    for (const outcome of OUTCOMES) {
      for (const source of SOURCES) {
        const value = totals.get(decisionsField(rule, outcome, source));
        const seeded = source === "redis" && (outcome === "allowed" || outcome === "denied");
        if (value !== undefined || seeded)
          samples.push({ labels: { rule, outcome, source }, value: value ?? 0 });
      }
    }
  }
  return samples;
}

/** The histogram per source that has decided anything: cumulative buckets, `+Inf`, sum (s) and count. */
function latencySamples(totals: ReadonlyMap<string, number>): Sample[] {
  const samples: Sample[] = [];
  for (const source of SOURCES) {
    const counts = [...LATENCY_BUCKETS_SECONDS, Number.POSITIVE_INFINITY].map(
      (_, i) => totals.get(latencyField(source, i)) ?? 0,
    );
    const count = counts.reduce((a, b) => a + b, 0);
    if (count === 0 && source !== "redis") continue;
    let cumulative = 0;
    counts.forEach((n, i) => {
      cumulative += n;
      const bound = LATENCY_BUCKETS_SECONDS[i];
      samples.push({
        suffix: "_bucket",
        labels: { source, le: bound === undefined ? "+Inf" : String(bound) },
        value: cumulative,
      });
    });
    samples.push(
      { suffix: "_sum", labels: { source }, value: (totals.get(latencySumField(source)) ?? 0) / 1e6 },
      { suffix: "_count", labels: { source }, value: count },
    );
  }
  return samples;
}

function labelText(labels: Labels | undefined): string {
  if (labels === undefined) return "";
  const pairs = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
  return pairs.length === 0 ? "" : `{${pairs.join(",")}}`;
}

/** Label values are escaped as both formats require (`\`, `"`, line feed). */
const escapeLabel = (value: string): string =>
  value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");

const number = (value: number): string =>
  Number.isFinite(value) ? String(value) : value > 0 ? "+Inf" : value < 0 ? "-Inf" : "NaN";
