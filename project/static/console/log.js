// Conveyor console: a deployment's log on its page (#deployment-log), without libraries.
//
// The server sends the log as lines of [classes, text] spans (deployments/log_page.py); they
// are built here from text nodes only, so nothing a step printed is ever read as markup.
// * One <details> per step, its name, status, start, duration and exit code in the summary:
//   open while it runs or when it failed, closed when it succeeded. Lines a step printed
//   starting "--- " (closed) or "+++ " (open) start a group inside it, as on Buildkite.
// * Follows the log from where the page's first look (#deployment-log-first) ended until it
//   is complete; paused while the tab is hidden or the deployment waits for approval, and
//   resumed by the page's refresh (console:refreshed). "Load earlier" reaches further back.
// * A search box highlights matches and jumps between them (Enter, Shift+Enter); a checkbox
//   shows each line's time (the time its chunk of output was stored).
(function () {
  "use strict";

  function liveState() {
    var el = document.querySelector("[data-live-state]");
    return el ? el.getAttribute("data-live-state") : "live";
  }

  function make(tag, cls, text) {
    var el = document.createElement(tag);
    if (cls) el.className = cls;
    if (text != null) el.textContent = text;
    return el;
  }

  function addSpans(parent, spans) {
    spans.forEach(function (span) {
      if (span[0]) parent.appendChild(make("span", span[0], span[1]));
      else parent.appendChild(document.createTextNode(span[1]));
    });
  }

  function clock(iso) { return iso ? iso.slice(11, 19) : ""; }

  var CLOSED_WHEN_DONE = { success: true, skipped: true, pending: true };

  function followLog(box) {
    var pre = box.querySelector("pre.log");
    var url = box.getAttribute("data-url");
    var chunk = parseInt(box.getAttribute("data-chunk"), 10) || 262144;
    var status = box.querySelector(".log-status");
    var earlier = box.querySelector(".log-earlier");
    var first = JSON.parse(document.getElementById("deployment-log-first").textContent);
    var start = first.start, next = first.next_offset, style = first.style;
    var complete = first.complete;
    var steps = [], received = [], sections, outside, openLine;

    function reset() {
      pre.textContent = "";
      sections = {};
      outside = { body: pre, group: null };
      openLine = null;
    }

    function describe(section, info) {
      var key = [info.status, info.duration, info.exit_code].join("|");
      if (section.key === key) return;
      var isNew = section.key === undefined;
      section.key = key;
      var head = section.summary;
      head.textContent = "";
      head.appendChild(make("span", "log-step-name", info.position + ". " + info.name));
      head.appendChild(make("span", "pill " + info.status, info.status));
      var meta = [];
      if (info.started_at) meta.push("started " + clock(info.started_at));
      if (info.duration != null) meta.push(info.duration.toFixed(1) + " s");
      if (info.exit_code != null) meta.push("exit " + info.exit_code);
      head.appendChild(make("span", "log-step-meta", meta.join(" · ")));
      section.el.className = "log-step " + info.status;
      // Open when first shown unless it succeeded; a step that fails later opens itself.
      if (isNew) section.el.open = !CLOSED_WHEN_DONE[info.status];
      else if (!CLOSED_WHEN_DONE[info.status] && info.status !== "running") section.el.open = true;
    }

    function stepInfo(id) {
      for (var i = 0; i < steps.length; i++) if (steps[i].id === id) return steps[i];
      return { id: id, position: "?", name: "step", status: "running" };
    }

    function section(id) {
      if (id == null) return outside;
      if (sections[id]) return sections[id];
      var details = make("details", "log-step");
      var summary = make("summary", "log-step-head");
      var body = make("div", "log-step-body");
      details.appendChild(summary);
      details.appendChild(body);
      details.setAttribute("data-step", String(id));
      pre.appendChild(details);
      sections[id] = { el: details, summary: summary, body: body, group: null };
      describe(sections[id], stepInfo(id));
      return sections[id];
    }

    function addLine(line) {
      if (openLine) {  // the rest of a line longer than one page
        addSpans(openLine, line.c);
        if (line.n !== false) { openLine.appendChild(document.createTextNode("\n")); openLine = null; }
        return;
      }
      var where = section(line.s);
      if (line.g) {
        var group = make("details", "log-group");
        group.open = line.g === "open";
        var head = make("summary", "log-group-head");
        head.setAttribute("data-time", clock(line.t));
        addSpans(head, line.c);
        var body = make("div", "log-group-body");
        group.appendChild(head);
        group.appendChild(body);
        where.body.appendChild(group);
        where.group = body;
        return;
      }
      var div = make("div", "log-line");
      div.setAttribute("data-time", clock(line.t));
      addSpans(div, line.c);
      if (line.n === false) openLine = div;
      else div.appendChild(document.createTextNode("\n"));
      (where.group || where.body).appendChild(div);
    }

    function apply(page) {
      steps = page.steps || steps;
      steps.forEach(function (info) { if (sections[info.id]) describe(sections[info.id], info); });
      page.lines.forEach(addLine);
      if (page.complete) {  // steps that printed nothing (skipped ones) still get their section
        steps.forEach(function (info) { if (info.status !== "pending") section(info.id); });
      }
      if (search.query) search.run(false);
    }

    function atBottom() { return pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40; }
    function setStatus(text) { if (status) status.textContent = text; }
    var timer = null;
    var asking = false;
    function later(ms) {
      timer = window.setTimeout(function () { timer = null; poll(); }, ms);
    }
    function poll() {
      if (complete) { setStatus("complete"); return; }
      if (document.hidden) { setStatus("paused while the tab is hidden"); return; }
      if (liveState() === "waiting") { setStatus("waiting for approval"); return; }
      setStatus("following…");
      asking = true;
      fetch(url + "?offset=" + next + "&style=" + encodeURIComponent(style), { credentials: "same-origin" })
        .then(function (r) { return r.json(); })
        .then(function (page) {
          asking = false;
          var stick = atBottom();
          received = received.concat(page.lines);
          apply(page);
          if (stick) pre.scrollTop = pre.scrollHeight;
          next = page.next_offset;
          style = page.style;
          complete = page.complete;
          if (complete) { box.setAttribute("data-complete", "true"); setStatus("complete"); }
          else later(page.lines.length ? 300 : 800);
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
        fetch(url + "?offset=" + from + "&limit=" + (start - from) + "&from=line", { credentials: "same-origin" })
          .then(function (r) { return r.json(); })
          .then(function (page) {
            received = page.lines.concat(received);
            start = page.lines.length ? page.start : from;
            reset();
            apply({ lines: received, steps: page.steps, complete: complete });
            earlier.hidden = start <= 0;
          });
      });
    }

    var search = searchBox(box, pre);
    var times = box.querySelector(".log-times");
    var hint = document.querySelector(".log-hint");
    times.addEventListener("change", function () {
      pre.classList.toggle("show-times", times.checked);
      if (hint) hint.textContent = times.checked ? "times (UTC) are when each piece of output was stored, to about a second" : "";
    });

    reset();
    received = first.lines.slice();
    apply(first);
    pre.scrollTop = pre.scrollHeight;
    poll();
  }

  // The search box: highlights every match in the log's text and jumps between them.
  function searchBox(box, pre) {
    var input = box.querySelector(".log-search-input");
    var count = box.querySelector(".log-search-count");
    var state = { query: "", run: run };
    var matches = [], current = -1, timer = null;

    function clear() {
      pre.querySelectorAll("mark.log-match").forEach(function (mark) {
        var parent = mark.parentNode;
        parent.replaceChild(document.createTextNode(mark.textContent), mark);
        parent.normalize();
      });
      matches = [];
    }
    function run(jump) {
      var keep = current;
      clear();
      state.query = input.value;
      var needle = state.query.toLowerCase();
      if (!needle) { current = -1; count.textContent = ""; return; }
      var walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT, null);
      var nodes = [];
      while (walker.nextNode()) {
        var parent = walker.currentNode.parentNode;
        if (parent.closest(".log-line, .log-group-head")) nodes.push(walker.currentNode);
      }
      nodes.forEach(function (node) {
        var text = node.nodeValue, lower = text.toLowerCase(), at = lower.indexOf(needle);
        if (at < 0) return;
        var pieces = document.createDocumentFragment(), from = 0;
        while (at >= 0) {
          pieces.appendChild(document.createTextNode(text.slice(from, at)));
          var mark = make("mark", "log-match", text.slice(at, at + needle.length));
          pieces.appendChild(mark);
          matches.push(mark);
          from = at + needle.length;
          at = lower.indexOf(needle, from);
        }
        pieces.appendChild(document.createTextNode(text.slice(from)));
        node.parentNode.replaceChild(pieces, node);
      });
      if (!matches.length) { current = -1; count.textContent = "no match"; return; }
      if (jump) { current = 0; show(true); }
      else { current = Math.min(Math.max(keep, 0), matches.length - 1); show(false); }
    }
    function show(scroll) {
      matches.forEach(function (mark, i) { mark.classList.toggle("current", i === current); });
      count.textContent = (current + 1) + " of " + matches.length;
      if (!scroll) return;
      var mark = matches[current];
      for (var el = mark.parentNode; el && el !== pre; el = el.parentNode) {
        if (el.tagName === "DETAILS") el.open = true;
      }
      mark.scrollIntoView({ block: "center" });
    }
    function go(step) {
      if (!matches.length) return;
      current = ((current + step) % matches.length + matches.length) % matches.length;
      show(true);
    }
    input.addEventListener("input", function () {
      window.clearTimeout(timer);
      current = -1;
      timer = window.setTimeout(function () { run(true); }, 150);
    });
    input.addEventListener("keydown", function (event) {
      if (event.key !== "Enter") return;
      event.preventDefault();
      if (input.value !== state.query) { current = -1; run(true); }
      else go(event.shiftKey ? -1 : 1);
    });
    box.querySelector(".log-search-next").addEventListener("click", function () { go(1); });
    box.querySelector(".log-search-prev").addEventListener("click", function () { go(-1); });
    return state;
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("#deployment-log[data-url]").forEach(followLog);
  });
})();
