/**
 * The page's "Deny and allow rules" and "Live lists" sections (docs/lists.md): each `action` rule with what
 * it matches, its mode and the requests it refused; each live list a rule reads, with a form to add an entry
 * (an address, a CIDR or a key's value, optionally for a TTL) and, once opened, its entries with a Remove
 * button each (client-lists.ts reads them from `GET /__floodgate/lists/:name`: the server's page and
 * `dashboard.json` carry no list entry).
 */
import { escapeHtml } from "./render-rule";
import type { ActionView, DashboardData, ListView } from "./view";

const actionRow = (action: ActionView) => {
  const name = escapeHtml(action.name);
  return `<tr data-action-rule="${name}">
<th scope="row"><code>${name}</code></th><td>${action.action}</td><td>${escapeHtml(action.matches)}</td>
<td><span data-field="mode">${escapeHtml(action.mode.effective)}</span> <small>(<span data-field="mode-source">${escapeHtml(action.mode.source)}</span>)</small></td>
<td data-field="last5m.denied">${action.last5m.denied}</td><td data-field="last1h.denied">${action.last1h.denied}</td><td data-field="last5m.wouldDeny">${action.last5m.wouldDeny}</td>
</tr>`;
};

const listCard = (list: ListView) => {
  const name = escapeHtml(list.name);
  return `<article class="live-list" data-live-list="${name}">
<details>
<summary><h3><code>${name}</code></h3> <span class="pill">read by ${escapeHtml(list.usedBy.join(", "))}</span> <span class="pill" data-field="list.count">open to read</span></summary>
<form data-list-add class="inline">
<label>Entry <input name="entry" required autocomplete="off" placeholder="203.0.113.0/24, 2001:db8::/48 or a key's value"></label>
<label>TTL s <input name="ttl" type="number" min="1" step="1" placeholder="none"></label>
<button type="submit">Add to ${name}</button>
</form>
<ol class="entries" data-list="entries"></ol>
<p class="hint" data-field="list.more"></p>
</details>
</article>`;
};

/** Both sections; nothing when the configuration has no action rule and reads no list. */
export function renderProtect(data: DashboardData): string {
  if (data.actions.length === 0 && data.lists.length === 0) return "";
  const actions =
    data.actions.length === 0
      ? ""
      : `<section id="action-rules" class="protect counted" aria-label="Deny and allow rules">
<h2>Deny and allow rules</h2>
<table class="counts">
<thead><tr><th>rule</th><th>action</th><th>matches</th><th>mode</th><th>refused 5 min</th><th>refused 1 h</th><th>would refuse 5 min</th></tr></thead>
<tbody>
${data.actions.map(actionRow).join("\n")}
</tbody>
</table>
</section>`;
  const lists =
    data.lists.length === 0
      ? ""
      : `<section id="live-lists" class="protect" aria-label="Live lists">
<h2>Live lists</h2>
<p class="hint">In effect in every isolate within about a second. Addresses and CIDRs show as written in the list; a key's value shows only hashed.</p>
${data.lists.map(listCard).join("\n")}
</section>`;
  return `${actions}\n${lists}`;
}
