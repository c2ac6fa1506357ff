/**
 * The part of the page's script (client.ts) that keeps the page fresh at the least cost to Redis (every
 * refresh is a few billed commands: docs/operating.md, "Dashboard"):
 * - every 5 s while the numbers change; each refresh that changes nothing doubles the wait, up to 60 s; a
 *   change, an action or coming back to the tab starts again at 5 s;
 * - nothing at all while the tab is hidden (Page Visibility API): a hidden tab costs no Redis command, and
 *   it refreshes at once when shown again.
 * The header says which (`data-refresh` on it: the wait in ms, or `paused`).
 */
export const CLIENT_REFRESH = `
  var BASE_MS = 5000;
  var MAX_MS = 60000;
  var waitMs = BASE_MS;
  var timer = 0;
  var inFlight = null;
  var lastSeen = "";
  var refreshEl = document.getElementById("refresh");

  /** What counts as a change: everything but the time it was read and Redis's latency of the moment. */
  function fingerprint(data) {
    return JSON.stringify(data, function (key, value) {
      return key === "generatedAt" || key === "latencyMs" ? undefined : value;
    });
  }

  function showWait(text, value) {
    refreshEl.textContent = text;
    refreshEl.setAttribute("data-refresh", value);
  }

  function refresh() {
    if (inFlight) return inFlight;
    inFlight = fetch(PREFIX + "/dashboard.json", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401) {
          window.location.reload();
          return null;
        }
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) {
        if (!data) return;
        var seen = fingerprint(data);
        waitMs = seen === lastSeen ? Math.min(waitMs * 2, MAX_MS) : BASE_MS;
        lastSeen = seen;
        render(data);
      })
      .catch(function (error) {
        waitMs = Math.min(waitMs * 2, MAX_MS);
        say("Refresh failed: " + error.message, false);
        markStale(true, "Refresh failed");
      })
      .then(function () { inFlight = null; });
    return inFlight;
  }

  function schedule() {
    clearTimeout(timer);
    timer = 0;
    if (document.visibilityState === "hidden") {
      showWait("· refresh paused while the tab is hidden", "paused");
      return;
    }
    showWait("· next refresh in " + Math.round(waitMs / 1000) + " s", String(waitMs));
    timer = setTimeout(function () { refresh().then(schedule); }, waitMs);
  }

  /** Refreshes now and from the shortest wait again (after an action, or when the tab is shown). */
  function refreshSoon() {
    waitMs = BASE_MS;
    lastSeen = "";
    return refresh().then(schedule);
  }

  function start(data) {
    lastSeen = fingerprint(data);
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "hidden") schedule();
      else refreshSoon();
    });
    schedule();
  }
`;
