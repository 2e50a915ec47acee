// Conveyor console: live parts of admin pages, without a full reload and without libraries.
//
// * [data-refresh-every="N"] on a container: every N seconds each element of the page marked
//   [data-refresh] (with an id) gets its new content: from the container's data-refresh-url
//   when it has one (a small JSON endpoint answering {"parts": {id: html}}), else from the
//   whole page fetched again. While the page's live state is "waiting" it checks only every
//   data-refresh-slow seconds (and reloads once the wait is over); once it is "finished" it
//   stops. A hidden tab asks nothing; shown again, it catches up at once.
// * #deployment-log[data-url]: follows a deployment's log from data-next until complete,
//   and "Load earlier" fetches the bytes before data-start; paused while the tab is hidden.
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

  function followLog(box) {
    var pre = box.querySelector("pre");
    var url = box.getAttribute("data-url");
    var next = parseInt(box.getAttribute("data-next"), 10) || 0;
    var start = parseInt(box.getAttribute("data-start"), 10) || 0;
    var chunk = parseInt(box.getAttribute("data-chunk"), 10) || 65536;
    var complete = box.getAttribute("data-complete") === "true";
    var status = box.querySelector(".log-status");
    var earlier = box.querySelector(".log-earlier");

    function atBottom() { return pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40; }
    function setStatus(text) { if (status) status.textContent = text; }
    var timer = null;
    var asking = false;
    function later(ms) {
      timer = window.setTimeout(function () { timer = null; poll(); }, ms);
    }
    function poll() {
      if (complete) { setStatus("complete"); return; }
      // Resumed by visibilitychange or by the page's refresh (console:refreshed).
      if (document.hidden) { setStatus("paused while the tab is hidden"); return; }
      if (liveState() === "waiting") { setStatus("waiting for approval"); return; }
      setStatus("following…");
      asking = true;
      fetch(url + "?offset=" + next, { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (page) {
          asking = false;
          var stick = atBottom();
          if (page.text) pre.appendChild(document.createTextNode(page.text));
          if (stick) pre.scrollTop = pre.scrollHeight;
          next = page.next_offset;
          box.setAttribute("data-next", String(next));
          complete = page.complete;
          if (complete) { box.setAttribute("data-complete", "true"); setStatus("complete"); }
          else later(page.text ? 300 : 800);
        })
        .catch(function () { asking = false; later(2000); });
    }
    function resume() {
      if (!complete && !asking && timer === null) poll();
    }
    document.addEventListener("visibilitychange", resume);
    document.addEventListener("console:refreshed", resume);
    if (earlier) {
      earlier.hidden = start <= 0;
      earlier.addEventListener("click", function () {
        var from = Math.max(0, start - chunk);
        fetch(url + "?offset=" + from + "&limit=" + (start - from), { credentials: "same-origin" })
          .then(function (r) { return r.json(); })
          .then(function (page) {
            pre.insertBefore(document.createTextNode(page.text), pre.firstChild);
            start = from;
            box.setAttribute("data-start", String(start));
            earlier.hidden = start <= 0;
          });
      });
    }
    pre.scrollTop = pre.scrollHeight;
    poll();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh-every]").forEach(refreshParts);
    document.querySelectorAll("#deployment-log[data-url]").forEach(followLog);
    document.addEventListener("submit", function (event) {
      var message = event.target.getAttribute && event.target.getAttribute("data-confirm");
      if (message && !window.confirm(message)) event.preventDefault();
    });
  });
})();
