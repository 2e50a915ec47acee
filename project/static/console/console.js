// Conveyor console: live parts of admin pages, without a full reload and without libraries.
//
// * [data-refresh-every="N"] on a container: every N seconds each element of the page marked
//   [data-refresh] (with an id) gets its new content: from the container's data-refresh-url
//   when it has one (a small JSON endpoint answering {"parts": {id: html}}), else from the
//   whole page fetched again. While the page's live state is "waiting" it checks only every
//   data-refresh-slow seconds (and reloads once the wait is over); once it is "finished" it
//   stops. A hidden tab asks nothing; shown again, it catches up at once.
// * A deployment's log is log.js's (loaded by the deployment page).
// * form[data-confirm]: asks before submitting.
(function () {
  "use strict";

  // The page's live state, from its [data-live-state] element (inside a refreshed part, so it
  // follows the server): "live" (the default), "waiting" (for approval) or "finished".
  function liveState() {
    var el = document.querySelector("[data-live-state]");
    return el ? el.getAttribute("data-live-state") : "live";
  }

  function refreshParts(root) {
    var seconds = parseFloat(root.getAttribute("data-refresh-every")) || 3;
    var busy = false;
    var url = root.getAttribute("data-refresh-url");
    function replace(freshHtmlOf) {
      document.querySelectorAll("[data-refresh][id]").forEach(function (el) {
        var html = freshHtmlOf(el.id);
        if (html != null && html !== el.innerHTML) el.innerHTML = html;
      });
      document.dispatchEvent(new CustomEvent("console:refreshed"));
    }
    function fromJson() {
      return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (data) {
          if (!data || !data.parts) return;
          // Parsed as a template, so an element's markup is taken as the browser would have.
          replace(function (id) {
            if (!(id in data.parts)) return null;
            var holder = document.getElementById(id).cloneNode(false);
            holder.innerHTML = data.parts[id];
            return holder.innerHTML;
          });
        });
    }
    function fromPage() {
      return fetch(window.location.href, { credentials: "same-origin", headers: { "X-Console-Refresh": "1" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var fresh = new DOMParser().parseFromString(html, "text/html");
          replace(function (id) {
            var next = fresh.getElementById(id);
            return next ? next.innerHTML : null;
          });
        });
    }
    var slow = parseFloat(root.getAttribute("data-refresh-slow")) || seconds;
    var waitingAtLoad = liveState() === "waiting";
    var timer = null;
    function schedule() {
      window.clearTimeout(timer);
      timer = null;
      var state = liveState();
      if (document.hidden || state === "finished") return;
      timer = window.setTimeout(tick, (state === "waiting" ? slow : seconds) * 1000);
    }
    function tick() {
      window.clearTimeout(timer);
      timer = null;
      if (busy || document.hidden) return;
      busy = true;
      (url ? fromJson() : fromPage())
        .catch(function () {})
        .finally(function () {
          busy = false;
          // Approved, rejected or expired meanwhile: the page it is now has other parts.
          if (waitingAtLoad && liveState() !== "waiting") window.location.reload();
          else schedule();
        });
    }
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) { window.clearTimeout(timer); timer = null; }
      else if (!busy && liveState() !== "finished") tick();
    });
    schedule();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh-every]").forEach(refreshParts);
    document.addEventListener("submit", function (event) {
      var message = event.target.getAttribute && event.target.getAttribute("data-confirm");
      if (message && !window.confirm(message)) event.preventDefault();
    });
  });
})();
