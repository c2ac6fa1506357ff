/**
 * The dashboard's HTML, rendered on the server: the first response already lists every rule with its
 * algorithm and numbers, and carries the same data as JSON in an attribute the page's script (client.ts)
 * starts from (no inline script of any kind, so the CSP needs no `'unsafe-inline'`); the script only refreshes
 * them and draws the charts. Every value is escaped; identities appear only hashed (`hash:…`), as the
 * metrics store them.
 */
import { ADMIN_PREFIX } from "../admin/prefix";
import { renderProtect } from "./render-lists";
import { escapeHtml, renderRule } from "./render-rule";
import type { DashboardData } from "./view";

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
<span class="updated">updated <time id="updated">${escapeHtml(data.generatedAt)}</time> <span id="refresh" role="status"></span></span>
<form method="post" action="${ADMIN_PREFIX}/logout"><button type="submit">Sign out</button></form>
</header>
<p id="status" role="status" aria-live="polite"></p>
<section id="summary" aria-label="Summary">${renderSummary(data)}</section>
<section id="health" aria-label="Health">${renderHealth(data)}</section>
<section id="global" aria-label="Global switch">
<form data-action="global-mode" class="inline">
<label>Every rule <select name="mode">
<option value="on">on</option><option value="monitor">monitor</option><option value="off">off</option><option value="clear">clear live switch</option>
</select></label>
<label>for <select name="ttl">
<option value="600">10 minutes</option><option value="3600" selected>1 hour</option><option value="86400">1 day</option><option value="">until cleared</option>
</select></label>
<button type="submit">Switch all</button>
</form>
</section>
<main id="rules">
${data.rules.map(renderRule).join("\n")}
</main>
${renderProtect(data)}
<section id="audit" aria-label="Audit trail">
<details><summary>Audit trail</summary>
<ol data-list="audit"></ol>
<button type="button" data-action="audit">Load the audit trail</button>
</details>
</section>
<div id="dashboard-data" hidden data-json="${escapeHtml(JSON.stringify(data))}"></div>`,
  );
}

/** The page's first lines, for a phone above all: is it healthy, and is anything being denied. */
function renderSummary(data: DashboardData): string {
  // Deny rules' refusals too: a denial is a denial, whichever rule answered it.
  const all = [...data.rules, ...data.actions];
  const denied = all.reduce((sum, rule) => sum + rule.last5m.denied, 0);
  const denying = all.filter((rule) => rule.last5m.denied > 0).map((rule) => rule.name);
  return `<p><strong data-field="summary.status" class="status-${escapeHtml(data.health.status)}">${escapeHtml(data.health.status)}</strong> · <span data-field="summary.denied">${denied} denied in 5 min${denying.length ? ` (${escapeHtml(denying.join(", "))})` : ""}</span> · <span data-field="summary.rules">${data.rules.length} rule${data.rules.length === 1 ? "" : "s"}</span></p>`;
}

/** Counts by reason, as `timeout 3, breaker_open 1`, or `none`. */
const byReason = (counts: Record<string, number>) =>
  Object.entries(counts)
    .map(([reason, n]) => `${escapeHtml(reason)} ${n}`)
    .join(", ") || "none";

/** The health strip (also re-rendered by the script from the same fields). */
function renderHealth(data: DashboardData): string {
  const { health, decisions } = data;
  // Only with a JWKS URL (docs/operating.md, "Health").
  const jwks = health.jwks
    ? `<div><dt>JWKS</dt><dd data-field="health.jwks">${escapeHtml(health.jwks.status)}</dd></div>\n`
    : "";
  const stale = data.countsRead ? "" : " stale";
  const isolate = data.isolate
    ? `${data.isolate.decisions} decisions, ${data.isolate.failedOpen} failed open, ${data.isolate.failedClosed} failed closed`
    : "";
  const local = decisions.servedLocally5m;
  return `<dl class="health">
<div><dt>Status</dt><dd data-field="health.status" class="status-${escapeHtml(health.status)}">${escapeHtml(health.status)}</dd></div>
<div><dt>Redis</dt><dd data-field="health.redis">${health.redis.reachable ? "reachable" : "unreachable"}${
    health.redis.latencyMs === null ? "" : `, ${health.redis.latencyMs} ms`
  }</dd></div>
<div><dt>Breaker</dt><dd data-field="health.breaker">${escapeHtml(health.breaker)}</dd></div>
${jwks}<div class="counted${stale}"><dt>Decisions (5 min / 1 h)</dt><dd data-field="decisions.total">${decisions.last5m} / ${decisions.last1h}</dd></div>
<div class="counted${stale}"><dt>Served locally (5 min)</dt><dd data-field="decisions.local">lease ${local.lease}, deny cache ${local.denyCache}</dd></div>
<div class="counted${stale}"><dt>Degraded (5 min)</dt><dd data-field="decisions.degraded">${byReason(decisions.faults5m)}</dd></div>
<div class="counted${stale}"><dt>Failed open / closed (5 min)</dt><dd data-field="decisions.failed">${decisions.failedOpen5m} / ${decisions.failedClosed5m}</dd></div>
<div data-show="isolate"${data.isolate ? "" : " hidden"}><dt>This isolate, not yet counted</dt><dd data-field="isolate">${isolate}</dd></div>
</dl>
<p class="freshness" data-field="freshness">${data.countsRead ? "" : "Counts unavailable: Redis could not be read."}</p>`;
}
