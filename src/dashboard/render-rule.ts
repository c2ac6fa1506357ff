/**
 * One rule's card as the server renders it (the page's script refreshes the same fields): a summary line a
 * phone shows collapsed, the facts, counts, chart, the identities denied most and closest to their limit
 * (each with Look up, Reset and Override), and the rule's actions.
 */
import { ADMIN_PREFIX } from "../admin/prefix";
import { renderBlocks } from "./render-blocks";
import { renderSettlement } from "./settlement";
import type { Counts, RuleView } from "./view";

/** Escapes text for HTML content and double-quoted attributes. */
export function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

const countCells = (period: "last5m" | "last1h", counts: Counts) =>
  (["allowed", "denied", "wouldDeny"] as const)
    .map((name) => `<td data-field="${period}.${name}">${counts[name]}</td>`)
    .join("");

const keyLink = (rule: string, identity: string) =>
  `<a href="${ADMIN_PREFIX}/keys/${encodeURIComponent(rule)}/${encodeURIComponent(identity)}" target="_blank" rel="noopener" data-identity="${escapeHtml(identity)}">${escapeHtml(identity)}</a>`;

/** The buttons on every listed identity (the script wires them). */
const identityButtons = `<span class="row-actions"><button type="button" data-row="lookup">Look up</button><button type="button" data-row="reset">Reset</button><button type="button" data-row="override">Override</button><button type="button" data-row="label">Label</button></span>`;

/** An operator's label next to a listed identity. */
const labelSpan = (label: string | undefined) =>
  label === undefined ? "" : ` <span class="label" data-label>${escapeHtml(label)}</span>`;

/** A listed identity's masked hint (`RATE_LIMIT_DASHBOARD_HINTS`), which the client sent: escaped as any text. */
const hintSpan = (hint: string | undefined) =>
  hint === undefined ? "" : ` <span class="masked" data-hint title="masked hint">${escapeHtml(hint)}</span>`;

/** "3 % of burst 10 left": the share of what a full state holds. */
export const remainingText = (percent: number, capacity: RuleView["capacity"]) =>
  `${percent}% of ${capacity.of} ${capacity.units} left`;

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
export function renderRule(rule: RuleView): string {
  const name = escapeHtml(rule.name);
  return `<article class="rule" data-rule="${name}">
<details class="card" open>
<summary><h2>${name}</h2> <span class="pill" data-field="summary.mode">${escapeHtml(rule.mode.effective)}</span> <span class="pill" data-field="summary.denied">${rule.last5m.denied} denied</span></summary>
<dl class="facts">
<div><dt>Algorithm</dt><dd data-field="algorithm">${escapeHtml(rule.algorithm)}</dd></div>
<div><dt>Limit</dt><dd>${rule.limit} per ${escapeHtml(rule.period)}${rule.burst !== rule.limit ? `, burst ${rule.burst}` : ""}</dd></div>
<div><dt>Key</dt><dd>${escapeHtml(rule.key)}</dd></div>
${rule.shaping ? `<div><dt>Shaping</dt><dd data-field="shaping">${escapeHtml(rule.shaping)}</dd></div>\n` : ""}<div><dt>Mode</dt><dd><span data-field="mode">${escapeHtml(rule.mode.effective)}</span> <small>(from <span data-field="mode-source">${escapeHtml(rule.mode.source)}</span>)</small></dd></div>
</dl>
<table class="counts counted">
<thead><tr><th></th><th>allowed</th><th>denied</th><th>would deny</th></tr></thead>
<tbody>
<tr><th>last 5 min</th>${countCells("last5m", rule.last5m)}</tr>
<tr><th>last hour</th>${countCells("last1h", rule.last1h)}</tr>
</tbody>
</table>
${renderSettlement(rule.settlement)}<svg class="chart counted" data-chart viewBox="0 0 300 60" role="img" aria-label="Requests per minute, last hour"></svg>
<div class="lists counted">
<div><h3>Top denied (5 min)</h3><ol data-list="topDenied">${rule.topDenied
    .map(
      (item) =>
        `<li>${keyLink(rule.name, item.identity)}${hintSpan(item.hint)}${labelSpan(item.label)} <span class="n">${item.count}</span>${identityButtons}</li>`,
    )
    .join("")}</ol></div>
<div><h3>Denied most (5 min)</h3><ol data-list="topPaths">${rule.topPaths
    .map((item) => `<li><code>${escapeHtml(item.route)}</code> <span class="n">${item.count}</span></li>`)
    .join("")}</ol></div>
<div><h3>Closest to the limit (5 min)</h3><ol data-list="nearest">${rule.nearest
    .map(
      (item) =>
        `<li>${keyLink(rule.name, item.identity)}${hintSpan(item.hint)}${labelSpan(item.label)} <span class="n">${remainingText(item.remainingPercent, rule.capacity)}</span>${identityButtons}</li>`,
    )
    .join("")}</ol></div>
</div>
${renderBlocks(rule)}
<div class="actions">
<form data-action="lookup">
<label>Look up <input name="identity" required placeholder="a client's value, or hash:…" autocomplete="off"></label>
<button type="submit">Look up</button>
</form>
<output class="lookup" data-panel="lookup"></output>
<form data-action="whatif">
<label>What if the ${rule.capacity.of} were <input name="limit" type="number" min="1" step="1" placeholder="${rule.capacity.units}"></label>
<button type="submit">What if</button>
</form>
<output class="whatif" data-panel="whatif"></output>
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
</details>
</article>`;
}
