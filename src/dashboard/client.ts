/**
 * The dashboard page's script, served as its own file (`/__floodgate/dashboard.js`) so the page's CSP can
 * forbid inline scripts. Plain ES2017 for any current browser, no build step and nothing fetched from
 * elsewhere. It refreshes the server-rendered numbers from `dashboard.json` every few seconds, draws each
 * rule's chart as SVG, and runs the actions through the admin API with the session cookie and the CSRF
 * token, saying on the page what each one did.
 */
import { ADMIN_PREFIX } from "../admin/prefix";
import { CSRF_HEADER } from "../admin/csrf";

/** The script's text, served as `/__floodgate/dashboard.js`. */
export const DASHBOARD_SCRIPT = `"use strict";
(function () {
  var PREFIX = ${JSON.stringify(ADMIN_PREFIX)};
  var REFRESH_MS = 5000;
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#2f855a", "#c53030", "#b7791f"];
  var LABELS = ["allowed", "denied", "would deny"];
  var csrf = document.querySelector('meta[name="floodgate-csrf"]').getAttribute("content");
  var statusEl = document.getElementById("status");

  function say(text, ok) {
    statusEl.textContent = text;
    statusEl.className = ok ? "ok" : "error";
  }

  function setField(root, name, value) {
    var el = root.querySelector('[data-field="' + name + '"]');
    if (el) el.textContent = String(value);
    return el;
  }

  function keyLink(rule, identity) {
    var a = document.createElement("a");
    a.href = PREFIX + "/keys/" + encodeURIComponent(rule) + "/" + encodeURIComponent(identity);
    a.target = "_blank";
    a.rel = "noopener";
    a.textContent = identity;
    return a;
  }

  function fillList(list, rule, items, label) {
    list.replaceChildren();
    items.forEach(function (item) {
      var li = document.createElement("li");
      li.appendChild(keyLink(rule, item.identity));
      var n = document.createElement("span");
      n.className = "n";
      n.textContent = " " + label(item);
      li.appendChild(n);
      list.appendChild(li);
    });
  }

  function drawChart(svg, series) {
    var width = 300, height = 60, max = 1;
    series.forEach(function (p) { max = Math.max(max, p[0] + p[1] + p[2]); });
    var barWidth = width / series.length;
    svg.replaceChildren();
    var axis = document.createElementNS(SVG, "line");
    axis.setAttribute("x1", "0");
    axis.setAttribute("x2", String(width));
    axis.setAttribute("y1", String(height - 0.5));
    axis.setAttribute("y2", String(height - 0.5));
    axis.setAttribute("stroke", "#a0aec0");
    svg.appendChild(axis);
    series.forEach(function (point, i) {
      var y = height - 1;
      for (var k = 0; k < 3; k++) {
        if (!point[k]) continue;
        var barHeight = Math.max(1, (point[k] / max) * (height - 4));
        y -= barHeight;
        var bar = document.createElementNS(SVG, "rect");
        bar.setAttribute("x", (i * barWidth).toFixed(2));
        bar.setAttribute("y", y.toFixed(2));
        bar.setAttribute("width", Math.max(barWidth - 0.6, 0.6).toFixed(2));
        bar.setAttribute("height", barHeight.toFixed(2));
        bar.setAttribute("fill", COLORS[k]);
        var title = document.createElementNS(SVG, "title");
        title.textContent = (series.length - i - 1) + " min ago: " + point[k] + " " + LABELS[k];
        bar.appendChild(title);
        svg.appendChild(bar);
      }
    });
  }

  function render(data) {
    document.getElementById("updated").textContent = data.generatedAt;
    var health = document.getElementById("health");
    var status = setField(health, "health.status", data.health.status);
    if (status) status.className = "status-" + data.health.status;
    setField(health, "health.redis", (data.health.redis.reachable ? "reachable" : "unreachable") +
      (data.health.redis.latencyMs === null ? "" : ", " + data.health.redis.latencyMs + " ms"));
    setField(health, "health.breaker", data.health.breaker);
    if (data.health.jwks) setField(health, "health.jwks", data.health.jwks.status);
    setField(health, "decisions.total", data.decisions.last5m + " / " + data.decisions.last1h);
    setField(health, "decisions.leased", data.decisions.last5m > 0
      ? Math.round((100 * data.decisions.leased5m) / data.decisions.last5m) + " %" : "none");
    var degraded = Object.keys(data.decisions.degraded5m).map(function (reason) {
      return reason + " " + data.decisions.degraded5m[reason];
    }).join(", ");
    setField(health, "decisions.degraded", degraded || "none");
    data.rules.forEach(function (rule) {
      var card = document.querySelector('[data-rule="' + rule.name + '"]');
      if (!card) return;
      setField(card, "mode", rule.mode.effective);
      setField(card, "mode-source", rule.mode.source);
      ["last5m", "last1h"].forEach(function (period) {
        ["allowed", "denied", "wouldDeny"].forEach(function (name) {
          setField(card, period + "." + name, rule[period][name]);
        });
      });
      drawChart(card.querySelector("[data-chart]"), rule.series);
      fillList(card.querySelector('[data-list="topDenied"]'), rule.name, rule.topDenied, function (item) {
        return String(item.count);
      });
      fillList(card.querySelector('[data-list="nearest"]'), rule.name, rule.nearest, function (item) {
        return item.remainingPercent + "% left";
      });
    });
  }

  function refresh() {
    return fetch(PREFIX + "/dashboard.json", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401) {
          window.location.reload();
          return null;
        }
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) { if (data) render(data); })
      .catch(function (error) { say("Refresh failed: " + error.message, false); });
  }

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

  // The first page of a rule's overrides; clicking one puts its hash and numbers in the form, to edit or delete.
  function listOverrides(rule, form) {
    return api("GET", "/overrides/" + encodeURIComponent(rule) + "?limit=20").then(function (result) {
      var list = form.closest("[data-rule]").querySelector('[data-list="overrides"]');
      list.replaceChildren();
      result.overrides.forEach(function (item) {
        var li = document.createElement("li");
        var button = document.createElement("button");
        button.type = "button";
        button.textContent = item.identity + ": " + item.limit + " per " + (item.period || "rule period") +
          ", burst " + item.burst + (item.ttl ? ", ttl " + item.ttl + " s" : "");
        button.addEventListener("click", function () {
          form.elements.identity.value = item.identity;
          form.elements.limit.value = String(item.limit);
          form.elements.period.value = item.period || "";
          form.elements.burst.value = String(item.burst);
          form.elements.ttl.value = item.ttl ? String(item.ttl) : "";
        });
        li.appendChild(button);
        list.appendChild(li);
      });
      return result.overrides.length + " override(s) under " + rule + (result.next_cursor ? " (first 20 shown)." : ".");
    });
  }

  var actions = {
    mode: function (rule, form) {
      var value = form.elements.mode.value;
      return api("PUT", "/mode", { rule: rule, mode: value === "clear" ? null : value }).then(function (result) {
        var now = result.rules.filter(function (r) { return r.name === rule; })[0];
        return "Rule " + rule + " is now " + now.mode.effective + " (from " + now.mode.source + ").";
      });
    },
    reset: function (rule, form) {
      var path = "/keys/" + encodeURIComponent(rule) + "/" + encodeURIComponent(form.elements.identity.value);
      return api("DELETE", path).then(function (result) {
        return (result.reset ? "Reset " : "Nothing to reset for ") + result.identity + " under " + rule + ".";
      });
    },
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

  document.querySelectorAll("form[data-action]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var rule = form.closest("[data-rule]").getAttribute("data-rule");
      var op = event.submitter ? event.submitter.value : "put";
      say("Working…", true);
      actions[form.getAttribute("data-action")](rule, form, op)
        .then(function (message) { say(message, true); return refresh(); })
        .catch(function (error) { say(error.message, false); });
    });
  });

  refresh();
  setInterval(refresh, REFRESH_MS);
})();
`;
