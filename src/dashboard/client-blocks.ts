/**
 * The part of the page's script (client.ts) behind each blocking rule's "Blocked now" panel (render-blocks.ts):
 * reads `GET /__floodgate/blocks/:rule` when the page opens, after every action, when the rule's denials move
 * (a block starts only with a denial), and on Reload; counts each block's time down every second, drops it
 * when it ends, and lifts one on its Lift button (asking first: the lift resets its counters too) with
 * `DELETE /__floodgate/keys/:rule/hash:…`, which the audit trail records as a reset.
 */
import { BLOCKS_LISTED } from "./render-blocks";

export const CLIENT_BLOCKS = `
  var deniedSeen = {};
  var ticking = 0;

  /** "14 min 5 s", "59 s": what is left of a block. */
  function leftText(ms) {
    var s = Math.max(0, Math.ceil(ms / 1000));
    if (s >= 3600) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
    if (s >= 60) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return s + " s";
  }

  function tickBlocks() {
    var now = Date.now();
    var rows = document.querySelectorAll("[data-blocks] li[data-ends]");
    rows.forEach(function (li) {
      var left = Number(li.getAttribute("data-ends")) - now;
      if (left <= 0) li.remove();
      else li.querySelector("[data-left]").textContent = " " + leftText(left) + " left";
    });
    if (rows.length === 0 && ticking) { clearInterval(ticking); ticking = 0; }
    if (rows.length > 0 && !ticking) ticking = setInterval(tickBlocks, 1000);
  }

  function loadBlocks(card) {
    var panel = card.querySelector("[data-blocks]");
    if (!panel) return Promise.resolve();
    var rule = card.getAttribute("data-rule");
    return api("GET", "/blocks/" + encodeURIComponent(rule) + "?limit=${BLOCKS_LISTED}").then(function (result) {
      var list = panel.querySelector('[data-list="blocked"]');
      list.replaceChildren();
      var readAt = Date.now();
      result.blocked.forEach(function (item) {
        var li = document.createElement("li");
        li.setAttribute("data-ends", String(readAt + item.left * 1000));
        var code = document.createElement("code");
        code.textContent = item.identity;
        li.appendChild(code);
        var left = document.createElement("span");
        left.className = "n";
        left.setAttribute("data-left", "");
        li.appendChild(left);
        var lift = button("Lift", "lift");
        lift.removeAttribute("data-row");
        lift.setAttribute("data-lift", item.identity);
        li.appendChild(lift);
        list.appendChild(li);
      });
      var n = result.blocked.length;
      setField(panel, "blocks.status", n === 0 ? "Nobody is blocked." :
        (result.next_cursor ? "The first " + n + " blocked identities:" : n + " blocked:"));
      tickBlocks();
    }).catch(function (error) {
      setField(panel, "blocks.status", "Could not read the blocked identities: " + error.message);
    });
  }

  function reloadBlocks() {
    document.querySelectorAll("[data-blocks]").forEach(function (panel) { loadBlocks(panel.closest("[data-rule]")); });
  }

  /** After a refresh: a blocking rule whose denials moved may have started (or ended) blocks. */
  function watchBlocks(data) {
    if (!data.countsRead) return;
    data.rules.forEach(function (rule) {
      if (!rule.block) return;
      var seen = rule.last5m.denied + "/" + rule.last1h.denied;
      if (deniedSeen[rule.name] === seen) return;
      deniedSeen[rule.name] = seen;
      var card = document.querySelector('[data-rule="' + rule.name + '"]');
      if (card) loadBlocks(card);
    });
  }

  document.getElementById("rules").addEventListener("click", function (event) {
    var reload = event.target.closest("[data-blocks-reload]");
    if (reload) {
      loadBlocks(reload.closest("[data-rule]")); // it says on the panel what it read
      return;
    }
    var lift = event.target.closest("[data-lift]");
    if (!lift) return;
    var card = lift.closest("[data-rule]");
    var rule = card.getAttribute("data-rule");
    var identity = lift.getAttribute("data-lift");
    if (!window.confirm("Lift the block of " + identity + " under " + rule + "? Its counters start from zero too.")) return;
    run(function () {
      return api("DELETE", keyPath(rule, identity)).then(function (result) {
        return (result.block_lifted ? "Lifted the block of " : "No block stood for ") + result.identity +
          " under " + rule + "; its counters start from zero.";
      });
    });
  });
`;
