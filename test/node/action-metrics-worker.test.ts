// A `deny` rule's refusals counted (docs/lists.md, "Counted"), through two Worker instances sharing the run's
// Redis: `GET /__floodgate/metrics` sums both isolates' 403s under `floodgate_decisions_total{outcome="denied",
// source="deny_cache"}` and a monitor deny rule's under `would_deny`, and the dashboard's counts show them by
// rule. An allow rule refuses nothing and is never counted.
import { expect, it } from "vitest";
import { useWorkers, type Worker } from "../support/workers";

const TOKEN = "action-metrics-admin-token";
const RULES = [
  { name: "partners", action: "allow", match: { ip: ["192.0.2.0/24"] } },
  { name: "no-scripts", action: "deny", match: { user_agent: ["*curl*"] } },
  { name: "watch-bots", action: "deny", match: { user_agent: ["*bot*"] }, mode: "monitor" },
  { name: "per-ip", key: "ip", algorithm: "fixed-window", limit: 1000, period: "1h" },
];

const fleet = useWorkers({
  name: "actionmetrics",
  bindings: { RATE_LIMIT_RULES: RULES, RATE_LIMIT_ADMIN_TOKEN: TOKEN },
});
const a = fleet.handle(0);
const b = fleet.handle(1);

const send = async (worker: Worker, userAgent: string, ip = "203.0.113.9") => {
  const response = await worker.fetch("/x", { headers: { "User-Agent": userAgent, "CF-Connecting-IP": ip } });
  await response.arrayBuffer();
  return response.status;
};

/** The value of one `floodgate_decisions_total` sample in A's scrape (0: absent). */
async function decisions(rule: string, outcome: string, source: string): Promise<number> {
  const text = await (
    await a.fetch("/__floodgate/metrics", { headers: { Authorization: `Bearer ${TOKEN}` } })
  ).text();
  const line = text
    .split("\n")
    .find((l) =>
      l.startsWith(`floodgate_decisions_total{rule="${rule}",outcome="${outcome}",source="${source}"}`),
    );
  return line === undefined ? 0 : Number(line.split(" ").at(-1));
}

it("counts a deny rule's 403s from every isolate as denied from deny_cache, a monitor one's as would_deny, on /metrics and the dashboard", async () => {
  // Present from the first scrape, at 0.
  expect(await decisions("no-scripts", "denied", "deny_cache")).toBe(0);

  const statuses = [
    await send(a, "curl/8.5"),
    await send(a, "curl/8.5"),
    await send(a, "curl/8.5"),
    await send(b, "curl/8.5"),
    await send(b, "curl/8.5"),
    await send(a, "friendly-bot/1.0"),
    await send(b, "friendly-bot/1.0"),
    await send(a, "curl/8.5", "192.0.2.7"), // a partner: allowed before the deny rule is reached
  ];
  expect(statuses).toEqual([403, 403, 403, 403, 403, 200, 200, 200]);

  // Each isolate flushes at most every 5 s, on a request: a harmless one from each, until both have.
  const until = Date.now() + 20_000;
  for (;;) {
    const [denied, wouldDeny] = await Promise.all([
      decisions("no-scripts", "denied", "deny_cache"),
      decisions("watch-bots", "would_deny", "deny_cache"),
    ]);
    if ((denied === 5 && wouldDeny === 2) || Date.now() > until) {
      expect([denied, wouldDeny]).toEqual([5, 2]);
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
    await Promise.all([send(a, "browser"), send(b, "browser")]);
  }
  expect(await decisions("no-scripts", "denied", "redis")).toBe(0);
  expect(await decisions("partners", "allowed", "redis")).toBe(0);

  const dashboard = (await (
    await a.fetch("/__floodgate/dashboard.json", { headers: { Authorization: `Bearer ${TOKEN}` } })
  ).json()) as { actions: { name: string; last5m: { denied: number; wouldDeny: number } }[] };
  expect(dashboard.actions.map((rule) => [rule.name, rule.last5m])).toEqual([
    ["partners", { denied: 0, wouldDeny: 0 }],
    ["no-scripts", { denied: 5, wouldDeny: 0 }],
    ["watch-bots", { denied: 0, wouldDeny: 2 }],
  ]);
}, 60_000);
