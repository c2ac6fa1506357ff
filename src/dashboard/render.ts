/**
 * The dashboard's HTML, rendered on the server: the first response already lists every rule with its
 * algorithm and numbers; the page's script (client.ts) only refreshes them and draws the charts. Every value
 * is escaped; identities appear only hashed (`hash:…`), as the metrics store them.
 */
import { ADMIN_PREFIX } from "../admin/prefix";
import type { Counts, DashboardData, RuleView } from "./view";

/** Escapes text for HTML content and double-quoted attributes. */
function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

const page = (title: string, head: string, body: string) =>
  `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<link rel="stylesheet" href="${ADMIN_PREFIX}/dashboard.css">
<link rel="icon" href="${ADMIN_PREFIX}/favicon.svg">
${head}
</head>
<body>
${body}
</body>
</html>
`;

/** The sign-in page (`failed`: the last attempt had a wrong token). */
export function renderSignIn(failed: boolean): string {
  return page(
    "Floodgate: sign in",
    "",
    `<main class="signin">
<h1>Floodgate</h1>
<form method="post" action="${ADMIN_PREFIX}/login">
<label for="token">Admin token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Sign in</button>
${failed ? '<p class="error" role="alert">That token is wrong.</p>' : ""}
<p class="hint">The value of <code>RATE_LIMIT_ADMIN_TOKEN</code> (<code>npm start</code> prints it).</p>
</form>
</main>`,
  );
}

/** The dashboard, with everything it shows already filled in. */
export function renderDashboard(data: DashboardData, csrf: string): string {
  return page(
    "Floodgate dashboard",
    `<meta name="floodgate-csrf" content="${escapeHtml(csrf)}">
<script src="${ADMIN_PREFIX}/dashboard.js" defer></script>`,
    `<header>
<h1>Floodgate</h1>
<span class="updated">updated <time id="updated">${escapeHtml(data.generatedAt)}</time></span>
<form method="post" action="${ADMIN_PREFIX}/logout"><button type="submit">Sign out</button></form>
</header>
<p id="status" role="status" aria-live="polite"></p>
<section id="health" aria-label="Health">${renderHealth(data)}</section>
<main id="rules">
${data.rules.map(renderRule).join("\n")}
</main>`,
  );
}

/** The share of recent decisions made from leases, with no Redis call. */
const leasedShare = (d: DashboardData["decisions"]): string =>
  d.last5m > 0 ? `${Math.round((100 * d.leased5m) / d.last5m)} %` : "none";

/** The health strip (also re-rendered by the script from the same fields). */
function renderHealth(data: DashboardData): string {
  const { health, decisions } = data;
  const degraded = (byReason: Record<string, number>) =>
    Object.entries(byReason)
      .map(([reason, n]) => `${escapeHtml(reason)} ${n}`)
      .join(", ") || "none";
  // Only with a JWKS URL (docs/operating.md, "Health").
  const jwks = health.jwks
    ? `<div><dt>JWKS</dt><dd data-field="health.jwks">${escapeHtml(health.jwks.status)}</dd></div>\n`
    : "";
  return `<dl class="health">
<div><dt>Status</dt><dd data-field="health.status" class="status-${escapeHtml(health.status)}">${escapeHtml(health.status)}</dd></div>
<div><dt>Redis</dt><dd data-field="health.redis">${health.redis.reachable ? "reachable" : "unreachable"}${
    health.redis.latencyMs === null ? "" : `, ${health.redis.latencyMs} ms`
  }</dd></div>
<div><dt>Breaker</dt><dd data-field="health.breaker">${escapeHtml(health.breaker)}</dd></div>
${jwks}<div><dt>Decisions (5 min / 1 h)</dt><dd data-field="decisions.total">${decisions.last5m} / ${decisions.last1h}</dd></div>
<div><dt>Decided from leases (5 min)</dt><dd data-field="decisions.leased">${leasedShare(decisions)}</dd></div>
<div><dt>Not from Redis (5 min)</dt><dd data-field="decisions.degraded">${degraded(decisions.degraded5m)}</dd></div>
</dl>`;
}

const countCells = (period: "last5m" | "last1h", counts: Counts) =>
  (["allowed", "denied", "wouldDeny"] as const)
    .map((name) => `<td data-field="${period}.${name}">${counts[name]}</td>`)
    .join("");

const keyLink = (rule: string, identity: string) =>
  `<a href="${ADMIN_PREFIX}/keys/${encodeURIComponent(rule)}/${encodeURIComponent(identity)}" target="_blank" rel="noopener">${escapeHtml(identity)}</a>`;

const modeOptions = (current: string) =>
  [
    ["on", "on"],
    ["monitor", "monitor"],
    ["off", "off"],
    ["clear", "clear live switch"],
  ]
    .map(
      ([value, label]) => `<option value="${value}"${value === current ? " selected" : ""}>${label}</option>`,
    )
    .join("");

/** One rule's card. */
function renderRule(rule: RuleView): string {
  const name = escapeHtml(rule.name);
  return `<article class="rule" data-rule="${name}">
<h2>${name}</h2>
<dl class="facts">
<div><dt>Algorithm</dt><dd data-field="algorithm">${escapeHtml(rule.algorithm)}</dd></div>
<div><dt>Limit</dt><dd>${rule.limit} per ${escapeHtml(rule.period)}${rule.burst !== rule.limit ? `, burst ${rule.burst}` : ""}</dd></div>
<div><dt>Key</dt><dd>${escapeHtml(rule.key)}</dd></div>
${rule.shaping ? `<div><dt>Shaping</dt><dd data-field="shaping">${escapeHtml(rule.shaping)}</dd></div>\n` : ""}<div><dt>Mode</dt><dd><span data-field="mode">${escapeHtml(rule.mode.effective)}</span> <small>(from <span data-field="mode-source">${escapeHtml(rule.mode.source)}</span>)</small></dd></div>
</dl>
<table class="counts">
<thead><tr><th></th><th>allowed</th><th>denied</th><th>would deny</th></tr></thead>
<tbody>
<tr><th>last 5 min</th>${countCells("last5m", rule.last5m)}</tr>
<tr><th>last hour</th>${countCells("last1h", rule.last1h)}</tr>
</tbody>
</table>
<svg class="chart" data-chart viewBox="0 0 300 60" role="img" aria-label="Requests per minute, last hour"></svg>
<div class="lists">
<div><h3>Top denied (5 min)</h3><ol data-list="topDenied">${rule.topDenied
    .map((item) => `<li>${keyLink(rule.name, item.identity)} <span class="n">${item.count}</span></li>`)
    .join("")}</ol></div>
<div><h3>Closest to the limit (5 min)</h3><ol data-list="nearest">${rule.nearest
    .map(
      (item) =>
        `<li>${keyLink(rule.name, item.identity)} <span class="n">${item.remainingPercent}% left</span></li>`,
    )
    .join("")}</ol></div>
</div>
<div class="actions">
<form data-action="mode">
<label>Mode <select name="mode">${modeOptions(rule.mode.effective)}</select></label>
<button type="submit">Switch</button>
</form>
<form data-action="reset">
<label>Identity <input name="identity" required placeholder="value or hash:…" autocomplete="off"></label>
<button type="submit">Reset counters</button>
</form>
<form data-action="override">
<label>Identity <input name="identity" required placeholder="value or hash:…" autocomplete="off"></label>
<label>Limit <input name="limit" type="number" min="1" step="1"></label>
<label>Period <input name="period" placeholder="${escapeHtml(rule.period)}" size="5"></label>
<label>Burst <input name="burst" type="number" min="1" step="1"></label>
<label>TTL s <input name="ttl" type="number" min="1" step="1"></label>
<button type="submit" name="op" value="put">Save override</button>
<button type="submit" name="op" value="delete">Delete override</button>
<button type="submit" name="op" value="list" formnovalidate>List overrides</button>
</form>
<ol class="overrides" data-list="overrides"></ol>
</div>
</article>`;
}
