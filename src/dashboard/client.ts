/**
 * The dashboard page's script, served as its own file (`/__floodgate/dashboard.js`) so the page's CSP can
 * forbid inline scripts. Plain ES2017 for any current browser, no build step and nothing fetched from
 * elsewhere. It starts from the data the server rendered into the page (no fetch on load), refreshes it from
 * `dashboard.json` (client-refresh.ts: paused while the tab is hidden, backing off while nothing changes),
 * draws each rule's chart as SVG, and runs the actions (client-actions.ts) through the admin API with the
 * session cookie and the CSRF token, saying on the page what each one did.
 */
import { ADMIN_PREFIX } from "../admin/prefix";
import { CLIENT_ACTIONS } from "./client-actions";
import { CLIENT_BLOCKS } from "./client-blocks";
import { CLIENT_LISTS } from "./client-lists";
import { CLIENT_REFRESH } from "./client-refresh";
import { CLIENT_RENDER } from "./client-render";

/** The script's text, served as `/__floodgate/dashboard.js`. */
export const DASHBOARD_SCRIPT = `"use strict";
(function () {
  var PREFIX = ${JSON.stringify(ADMIN_PREFIX)};
  var statusEl = document.getElementById("status");
  var initial = JSON.parse(document.getElementById("dashboard-data").getAttribute("data-json"));

  function say(text, ok) {
    statusEl.textContent = text;
    statusEl.className = ok ? "ok" : "error";
  }
${CLIENT_RENDER}
${CLIENT_REFRESH}
${CLIENT_ACTIONS}
${CLIENT_BLOCKS}
${CLIENT_LISTS}
  // A phone shows the summary and each rule's headline first; a card opens with a tap.
  if (window.matchMedia && window.matchMedia("(max-width: 700px)").matches) {
    document.querySelectorAll("details.card").forEach(function (card) { card.open = false; });
  }
  render(initial);
  start(initial);
})();
`;
