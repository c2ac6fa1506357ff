/**
 * The part of the page's script (client.ts) that puts data on the page: the summary, the health strip, each
 * rule's numbers, lists and chart. While the counts could not be read (`countsRead: false`) or a refresh
 * failed, the last good numbers stay, greyed, and the page says when they were read ("last good 13:12:29").
 */
export const CLIENT_RENDER = `
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = ["#2f855a", "#c53030", "#b7791f"];
  var LABELS = ["allowed", "denied", "would deny"];
  var lastGoodAt = null;

  function setField(root, name, value) {
    var el = root.querySelector('[data-field="' + name + '"]');
    if (el) el.textContent = String(value);
    return el;
  }

  /** Local wall-clock time of an ISO instant, HH:MM:SS. */
  function clock(iso) { return new Date(iso).toTimeString().slice(0, 8); }

  function byReason(counts) {
    return Object.keys(counts).map(function (reason) { return reason + " " + counts[reason]; }).join(", ") || "none";
  }

  function button(label, row) {
    var b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.setAttribute("data-row", row);
    return b;
  }

  /** A listed identity: its hash (a link to its state as JSON), its hint, its label, a number, and its buttons. */
  function identityItem(rule, identity, text, label, hint) {
    var li = document.createElement("li");
    var a = document.createElement("a");
    a.href = PREFIX + "/keys/" + encodeURIComponent(rule) + "/" + encodeURIComponent(identity);
    a.target = "_blank";
    a.rel = "noopener";
    a.textContent = identity;
    a.setAttribute("data-identity", identity);
    li.appendChild(a);
    if (hint !== undefined) {
      var masked = document.createElement("span");
      masked.className = "masked";
      masked.setAttribute("data-hint", "");
      masked.title = "masked hint";
      masked.textContent = hint;
      li.appendChild(document.createTextNode(" "));
      li.appendChild(masked);
    }
    if (label !== undefined) {
      var tag = document.createElement("span");
      tag.className = "label";
      tag.setAttribute("data-label", "");
      tag.textContent = label;
      li.appendChild(document.createTextNode(" "));
      li.appendChild(tag);
    }
    var n = document.createElement("span");
    n.className = "n";
    n.textContent = " " + text;
    li.appendChild(n);
    var actions = document.createElement("span");
    actions.className = "row-actions";
    actions.appendChild(button("Look up", "lookup"));
    actions.appendChild(button("Reset", "reset"));
    actions.appendChild(button("Override", "override"));
    actions.appendChild(button("Label", "label"));
    li.appendChild(actions);
    return li;
  }

  function fillList(list, rule, items, text) {
    list.replaceChildren();
    items.forEach(function (item) { list.appendChild(identityItem(rule, item.identity, text(item), item.label, item.hint)); });
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

  /** Greys the counts (or not) and says how fresh they are. */
  function markStale(stale, why) {
    document.querySelectorAll(".counted").forEach(function (el) { el.classList.toggle("stale", stale); });
    var text = "";
    if (stale) text = why + (lastGoodAt ? "; last good " + clock(lastGoodAt) : "") + ".";
    setField(document.getElementById("health"), "freshness", text);
  }

  function renderHealth(data) {
    var health = document.getElementById("health");
    var status = setField(health, "health.status", data.health.status);
    if (status) status.className = "status-" + data.health.status;
    setField(health, "health.redis", (data.health.redis.reachable ? "reachable" : "unreachable") +
      (data.health.redis.latencyMs === null ? "" : ", " + data.health.redis.latencyMs + " ms"));
    setField(health, "health.breaker", data.health.breaker);
    if (data.health.jwks) setField(health, "health.jwks", data.health.jwks.status);
    var isolate = health.querySelector('[data-show="isolate"]');
    isolate.hidden = !data.isolate;
    if (data.isolate) {
      setField(health, "isolate", data.isolate.decisions + " decisions, " + data.isolate.failedOpen +
        " failed open, " + data.isolate.failedClosed + " failed closed");
    }
    var summary = document.getElementById("summary");
    var summaryStatus = setField(summary, "summary.status", data.health.status);
    if (summaryStatus) summaryStatus.className = "status-" + data.health.status;
  }

  function renderCounts(data) {
    var health = document.getElementById("health");
    var d = data.decisions;
    setField(health, "decisions.total", d.last5m + " / " + d.last1h);
    setField(health, "decisions.local", "lease " + d.servedLocally5m.lease + ", deny cache " + d.servedLocally5m.denyCache);
    setField(health, "decisions.degraded", byReason(d.faults5m));
    setField(health, "decisions.failed", d.failedOpen5m + " / " + d.failedClosed5m);
    var denied = 0, denying = [];
    data.rules.concat(data.actions).forEach(function (rule) {
      denied += rule.last5m.denied;
      if (rule.last5m.denied > 0) denying.push(rule.name);
    });
    setField(document.getElementById("summary"), "summary.denied",
      denied + " denied in 5 min" + (denying.length ? " (" + denying.join(", ") + ")" : ""));
    data.rules.forEach(function (rule) {
      var card = document.querySelector('[data-rule="' + rule.name + '"]');
      if (!card) return;
      setField(card, "summary.denied", rule.last5m.denied + " denied");
      ["last5m", "last1h"].forEach(function (period) {
        ["allowed", "denied", "wouldDeny"].forEach(function (name) {
          setField(card, period + "." + name, rule[period][name]);
        });
      });
      if (rule.settlement) {
        ["settled", "kept", "reserved", "charged", "givenBack"].forEach(function (name) {
          setField(card, "settlement." + name, rule.settlement[name]);
        });
      }
      drawChart(card.querySelector("[data-chart]"), rule.series);
      fillList(card.querySelector('[data-list="topDenied"]'), rule.name, rule.topDenied, function (item) {
        return String(item.count);
      });
      var routes = card.querySelector('[data-list="topPaths"]');
      routes.replaceChildren();
      rule.topPaths.forEach(function (item) {
        var li = document.createElement("li");
        var code = document.createElement("code");
        code.textContent = item.route;
        li.appendChild(code);
        li.appendChild(document.createTextNode(" " + item.count));
        routes.appendChild(li);
      });
      fillList(card.querySelector('[data-list="nearest"]'), rule.name, rule.nearest, function (item) {
        return item.remainingPercent + "% of " + rule.capacity.of + " " + rule.capacity.units + " left";
      });
    });
  }

  function render(data) {
    document.getElementById("updated").textContent = data.generatedAt;
    renderActionRules(data); // client-lists.ts
    renderHealth(data);
    data.rules.forEach(function (rule) {
      var card = document.querySelector('[data-rule="' + rule.name + '"]');
      if (!card) return;
      setField(card, "mode", rule.mode.effective);
      setField(card, "summary.mode", rule.mode.effective);
      setField(card, "mode-source", rule.mode.source);
    });
    // Counts of 0 that only mean "Redis did not answer" never replace numbers that were read.
    if (data.countsRead) {
      lastGoodAt = data.generatedAt;
      renderCounts(data);
      watchBlocks(data); // client-blocks.ts
      markStale(false, "");
    } else {
      markStale(true, "Counts unavailable: Redis could not be read");
    }
  }
`;
