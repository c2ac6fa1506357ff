/**
 * The part of the page's script (client.ts) that runs what an operator clicks, through the admin API with
 * the session cookie and the CSRF token: Look up (read-only: the value goes in a POST body, never a URL, and
 * the field is emptied once its hash is shown), Reset, Override and Label on any listed identity, the mode switches
 * (switching off asks first), overrides, and the audit trail.
 */
import { CSRF_HEADER } from "../admin/csrf";

export const CLIENT_ACTIONS = `
  var csrf = document.querySelector('meta[name="floodgate-csrf"]').getAttribute("content");

  function api(method, path, body) {
    var init = { method: method, credentials: "same-origin", headers: { ${JSON.stringify(CSRF_HEADER)}: csrf } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(PREFIX + path, init).then(function (response) {
      return response.text().then(function (text) {
        var json = null;
        try { json = text ? JSON.parse(text) : null; } catch (e) { json = null; }
        if (!response.ok) throw new Error((json && json.detail) || "HTTP " + response.status);
        return json;
      });
    });
  }

  var keyPath = function (rule, identity) {
    return "/keys/" + encodeURIComponent(rule) + "/" + encodeURIComponent(identity);
  };

  /** One identity's state in words, as the look-up panel shows it. */
  function stateText(s) {
    var text = s.identity + ": " + (s.allowed ? "allowed" : "denied, retry in " + s.retry_after + " s") +
      ", " + s.remaining + " of " + s.limit + " left" + (s.reset_after ? ", full again in " + s.reset_after + " s" : "");
    if (s.override) {
      text += "; override " + s.override.limit + " per " + (s.override.period || "rule period") +
        ", burst " + s.override.burst + (s.override.ttl ? ", " + s.override.ttl + " s left" : "");
    }
    return text + ".";
  }

  function lookUp(card, rule, identity) {
    return api("POST", "/lookup/" + encodeURIComponent(rule), { identity: identity }).then(function (state) {
      var panel = card.querySelector('[data-panel="lookup"]');
      panel.replaceChildren();
      var line = document.createElement("span");
      line.textContent = stateText(state);
      panel.appendChild(line);
      var actions = document.createElement("span");
      actions.className = "row-actions";
      actions.setAttribute("data-identity", state.identity);
      actions.appendChild(button("Reset", "reset"));
      actions.appendChild(button("Override", "override"));
      actions.appendChild(button("Label", "label"));
      panel.appendChild(actions);
      return "Looked up " + state.identity + " under " + rule + " (nothing was counted or changed).";
    });
  }

  function resetIdentity(rule, identity) {
    return api("DELETE", keyPath(rule, identity)).then(function (result) {
      return (result.reset ? "Reset " : "Nothing to reset for ") + result.identity + " under " + rule + ".";
    });
  }

  function confirmOff(what) {
    return window.confirm("Switch " + what + " off? Nothing is counted or limited until it is switched back.");
  }

  // The first page of a rule's overrides; clicking one puts its hash and numbers in the form, to edit or delete.
  function listOverrides(rule, form) {
    return api("GET", "/overrides/" + encodeURIComponent(rule) + "?limit=20").then(function (result) {
      var list = form.closest("[data-rule]").querySelector('[data-list="overrides"]');
      list.replaceChildren();
      result.overrides.forEach(function (item) {
        var li = document.createElement("li");
        var b = document.createElement("button");
        b.type = "button";
        b.textContent = item.identity + ": " + item.limit + " per " + (item.period || "rule period") +
          ", burst " + item.burst + (item.ttl ? ", ttl " + item.ttl + " s" : "");
        b.addEventListener("click", function () {
          form.elements.identity.value = item.identity;
          form.elements.limit.value = String(item.limit);
          form.elements.period.value = item.period || "";
          form.elements.burst.value = String(item.burst);
          form.elements.ttl.value = item.ttl ? String(item.ttl) : "";
        });
        li.appendChild(b);
        list.appendChild(li);
      });
      return result.overrides.length + " override(s) under " + rule + (result.next_cursor ? " (first 20 shown)." : ".");
    });
  }

  var actions = {
    lookup: function (rule, form) {
      var value = form.elements.identity.value;
      // The value is not kept on the page: only its hash is shown.
      form.elements.identity.value = "";
      return lookUp(form.closest("[data-rule]"), rule, value);
    },
    whatif: function (rule, form) {
      var limit = form.elements.limit.value;
      var query = limit ? "?limit=" + encodeURIComponent(limit) : "";
      return api("GET", "/whatif/" + encodeURIComponent(rule) + query).then(function (result) {
        var panel = form.closest("[data-rule]").querySelector('[data-panel="whatif"]');
        panel.replaceChildren();
        var list = document.createElement("ol");
        list.className = "spread";
        result.spread.forEach(function (band) {
          var li = document.createElement("li");
          var bar = document.createElement("span");
          bar.className = "bar" + (band.toPercent === null ? " over" : "");
          bar.style.width = (result.identities ? Math.round((100 * band.identities) / result.identities) : 0) + "%";
          li.textContent = (band.toPercent === null ? "over 100 %" : band.fromPercent + "–" + band.toPercent + " %") +
            ": " + band.identities;
          li.appendChild(bar);
          list.appendChild(li);
        });
        var heading = document.createElement("p");
        heading.textContent = result.identities + " identities in the last hour, by their peak demand (% of " +
          result.capacity.of + " " + result.capacity.units + "):";
        panel.appendChild(heading);
        panel.appendChild(list);
        var verdict = document.createElement("p");
        verdict.setAttribute("data-field", "whatif.verdict");
        verdict.textContent = result.proposed
          ? "At " + result.capacity.of + " " + result.proposed.limit + ", " + result.proposed.denied + " of " +
            result.identities + " identities would have been denied in the last hour."
          : "Give a " + result.capacity.of + " to see how many would have been denied.";
        panel.appendChild(verdict);
        return "What if for " + rule + ": nothing was changed.";
      });
    },
    mode: function (rule, form) {
      var value = form.elements.mode.value;
      if (value === "off" && !confirmOff("rule " + rule)) return Promise.resolve("Rule " + rule + " was not switched.");
      return api("PUT", "/mode", { rule: rule, mode: value === "clear" ? null : value }).then(function (result) {
        var now = result.rules.filter(function (r) { return r.name === rule; })[0];
        return "Rule " + rule + " is now " + now.mode.effective + " (from " + now.mode.source + ").";
      });
    },
    "global-mode": function (rule, form) {
      var value = form.elements.mode.value;
      if (value === "off" && !confirmOff("every rule")) return Promise.resolve("Nothing was switched.");
      var body = { mode: value === "clear" ? null : value };
      if (value !== "clear" && form.elements.ttl.value) body.ttl = Number(form.elements.ttl.value);
      return api("PUT", "/mode", body).then(function (result) {
        if (!result.mode.live) return "No live global switch: every rule follows its configuration (" + result.mode.effective + ").";
        return "Live global switch: " + result.mode.live +
          (result.mode.until ? " until " + clock(result.mode.until) : " until cleared") + ".";
      });
    },
    reset: function (rule, form) { return resetIdentity(rule, form.elements.identity.value); },
    override: function (rule, form, op) {
      if (op === "list") return listOverrides(rule, form);
      var path = "/overrides/" + encodeURIComponent(rule) + "/" + encodeURIComponent(form.elements.identity.value);
      if (op === "delete") {
        return api("DELETE", path).then(function () { return "Override removed under " + rule + "."; });
      }
      var body = { limit: Number(form.elements.limit.value) };
      if (form.elements.period.value) body.period = form.elements.period.value;
      if (form.elements.burst.value) body.burst = Number(form.elements.burst.value);
      if (form.elements.ttl.value) body.ttl = Number(form.elements.ttl.value);
      return api("PUT", path, body).then(function (result) {
        return "Override for " + result.identity + " under " + rule + ": limit " + result.limit +
          " per " + (result.period || "the rule's period") + ", burst " + result.burst +
          (result.ttl ? ", for " + result.ttl + " s." : ", until deleted.");
      });
    },
  };

  function run(action) {
    say("Working…", true);
    return action()
      .then(function (message) { say(message, true); reloadBlocks(); return refreshSoon(); })
      .catch(function (error) { say(error.message, false); });
  }

  document.querySelectorAll("form[data-action]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var card = form.closest("[data-rule]");
      var rule = card ? card.getAttribute("data-rule") : null;
      var op = event.submitter ? event.submitter.value : "put";
      run(function () { return actions[form.getAttribute("data-action")](rule, form, op); });
    });
  });

  // Look up, Reset and Override on a listed identity (or a looked-up one): always by its hash.
  document.getElementById("rules").addEventListener("click", function (event) {
    var target = event.target.closest("[data-row], a[data-identity]");
    if (!target) return;
    var card = target.closest("[data-rule]");
    var rule = card.getAttribute("data-rule");
    var holder = target.closest("li") || target.closest("[data-identity]");
    var named = holder.querySelector("[data-identity]") || holder;
    var identity = named.getAttribute("data-identity");
    var row = target.getAttribute("data-row") || "lookup";
    event.preventDefault();
    if (row === "lookup") run(function () { return lookUp(card, rule, identity); });
    if (row === "reset") {
      if (!window.confirm("Reset " + identity + " under " + rule + "? Its counters start from zero.")) return;
      run(function () { return resetIdentity(rule, identity); });
    }
    if (row === "label") {
      var text = window.prompt("Label for " + identity + " under " + rule + " (kept 30 days; empty removes it). Never the client's raw key or IP.", "");
      if (text === null) return;
      var path = "/labels/" + encodeURIComponent(rule) + "/" + encodeURIComponent(identity);
      run(function () {
        if (!text.trim()) return api("DELETE", path).then(function () { return "Label of " + identity + " removed."; });
        return api("PUT", path, { label: text }).then(function (result) {
          return "Labelled " + result.identity + " under " + rule + ": " + result.label + ".";
        });
      });
    }
    if (row === "override") {
      var form = card.querySelector('form[data-action="override"]');
      form.elements.identity.value = identity;
      form.elements.limit.focus();
      say("Set the override for " + identity + " under " + rule + ", then Save override.", true);
    }
  });

  // The audit trail: read when asked (each read is one Redis command).
  document.querySelector('[data-action="audit"]').addEventListener("click", function () {
    run(function () {
      return api("GET", "/audit?limit=50").then(function (result) {
        var list = document.querySelector('[data-list="audit"]');
        list.replaceChildren();
        result.entries.forEach(function (entry) {
          var li = document.createElement("li");
          li.textContent = clock(entry.at) + " " + entry.who + ": " + entry.what +
            (entry.before === undefined ? "" : ", " + JSON.stringify(entry.before) + " → " + JSON.stringify(entry.after));
          list.appendChild(li);
        });
        return result.entries.length + " change(s) in the audit trail.";
      });
    });
  });
`;
