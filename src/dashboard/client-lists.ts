/**
 * The part of the page's script (client.ts) behind the "Deny and allow rules" and "Live lists" sections
 * (render-lists.ts): each action rule's mode and refusals, refreshed with the rest; a live list's entries,
 * read from `GET /__floodgate/lists/:name` when its panel is opened (the first LIST_SHOWN of them), each with a
 * Remove button that asks first; the Add form (`PATCH … { "add" }`, with a TTL when given), whose field is
 * emptied once sent (a key's value is kept only hashed). Every edit is in the audit trail.
 */
export const LIST_SHOWN = 200;

export const CLIENT_LISTS = `
  function renderActionRules(data) {
    (data.actions || []).forEach(function (action) {
      var row = document.querySelector('[data-action-rule="' + action.name + '"]');
      if (!row) return;
      setField(row, "mode", action.mode.effective);
      setField(row, "mode-source", action.mode.source);
      if (!data.countsRead) return;
      setField(row, "last5m.denied", action.last5m.denied);
      setField(row, "last1h.denied", action.last1h.denied);
      setField(row, "last5m.wouldDeny", action.last5m.wouldDeny);
    });
  }

  var listPath = function (name) { return "/lists/" + encodeURIComponent(name); };

  function entryItem(item) {
    var li = document.createElement("li");
    var entry = typeof item === "string" ? item : item.entry;
    var code = document.createElement("code");
    code.textContent = entry;
    li.appendChild(code);
    if (typeof item !== "string") {
      var ttl = document.createElement("span");
      ttl.className = "n";
      ttl.textContent = " expires in " + leftText(item.ttl * 1000);
      li.appendChild(ttl);
    }
    var remove = button("Remove", "remove");
    remove.removeAttribute("data-row");
    remove.setAttribute("data-list-remove", entry);
    li.appendChild(remove);
    return li;
  }

  function loadList(panel) {
    var name = panel.getAttribute("data-live-list");
    return api("GET", listPath(name) + "?limit=${LIST_SHOWN}").then(function (result) {
      setField(panel, "list.count", result.count + (result.count === 1 ? " entry" : " entries"));
      var list = panel.querySelector('[data-list="entries"]');
      list.replaceChildren();
      result.entries.forEach(function (item) { list.appendChild(entryItem(item)); });
      setField(panel, "list.more", result.count > result.entries.length
        ? "The first " + result.entries.length + " of " + result.count + " shown (GET /__floodgate/lists/" + name + " has them all)."
        : "");
      return result;
    });
  }

  function editList(panel, body, done) {
    var name = panel.getAttribute("data-live-list");
    return api("PATCH", listPath(name), body).then(function (result) {
      return loadList(panel).then(function () {
        return done + " " + name + ": " + result.count + (result.count === 1 ? " entry" : " entries") +
          " now, in effect everywhere within about a second.";
      });
    });
  }

  document.querySelectorAll("[data-live-list]").forEach(function (panel) {
    var details = panel.querySelector("details");
    details.addEventListener("toggle", function () {
      if (details.open) loadList(panel).catch(function (error) { say(error.message, false); });
    });
    var form = panel.querySelector("form[data-list-add]");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var entry = form.elements.entry.value.trim();
      var ttl = form.elements.ttl.value;
      // A key's value is not kept on the page: the list shows it hashed.
      form.elements.entry.value = "";
      var added = ttl ? { entry: entry, ttl: Number(ttl) } : entry;
      run(function () {
        return editList(panel, { add: [added] }, (ttl ? "Added for " + ttl + " s to" : "Added to"));
      });
    });
    panel.addEventListener("click", function (event) {
      var remove = event.target.closest("[data-list-remove]");
      if (!remove) return;
      var entry = remove.getAttribute("data-list-remove");
      var name = panel.getAttribute("data-live-list");
      if (!window.confirm("Remove " + entry + " from list " + name + "? Every isolate stops matching it within about a second.")) return;
      run(function () { return editList(panel, { remove: [entry] }, "Removed " + entry + " from"); });
    });
  });
`;
