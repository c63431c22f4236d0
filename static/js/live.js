/* E31 live pages: the "live" htmx extension beside the vendored ws extension (docs/live.md).
 *
 * The server pushes HTML fragments over a WebSocket (a full snapshot on every
 * connect, then one message per committed change). Each fragment is one element
 * with an id and a data-version: integers compared left to right
 * ("event_seq stamp_ms", or "event_seq log_size" for the log). This file
 *   - drops a fragment older than the one shown (a page rendered a moment
 *     before a change, a late message, a reconnect), so the page never goes back;
 *   - appends log chunks at their byte offset, asks for a snapshot when it
 *     missed one, and keeps the tail scrolled to the end unless the user scrolled up;
 *   - adds new rows to "My jobs" (job and array rows), also to a list that was empty;
 *   - converges (issue 12 item 7): every frame says which numbered group messages it
 *     answers (<template data-live="snapshot|seq|beat" data-live-seqs="group:n ...">);
 *     a number that never arrives (a full channel dropped it), a heartbeat naming a
 *     number not seen, or a socket silent for longer than 2.5 heartbeats makes the
 *     page ask for a snapshot (and, still silent, reconnect);
 *   - announces state changes (aria-live region), and when a job starts running
 *     or is released, notifies (Notification API, after consent) and marks the tab title;
 *   - reconnects after any unexpected close, and asks for a snapshot when the tab is shown again.
 * Without JavaScript none of this runs and every page works by plain reload.
 */
(function () {
  "use strict";
  if (typeof htmx === "undefined") return;

  var NOTIFY_STATES = { running: "is running", released: "is released" };
  var sockets = [];          // {wrapper, socket} of each open live socket on the page
  var follow = {};           // log <pre> id -> keep scrolled to the end?
  var kept = {};             // log <pre> id -> where the reader is (px from the top), when not following
  var announced = {};        // "id:state" already notified on this page
  var baseTitle = document.title;

  // Reconnect quickly (0.25 s doubling, at most 5 s, jittered) so a restarted server is found fast.
  htmx.config.wsReconnectDelay = function (retry) {
    return Math.min(5000, 250 * Math.pow(2, retry)) * (0.5 + Math.random() / 2);
  };

  function versionOf(el) {
    var raw = el && el.getAttribute("data-version");
    return raw ? raw.trim().split(/\s+/).map(Number) : null;
  }

  /** -1, 0 or 1 as version a is older than, the same as, or newer than b. */
  function compare(a, b) {
    for (var i = 0; i < Math.max(a.length, b.length); i++) {
      var x = a[i] || 0, y = b[i] || 0;
      if (x !== y) return x < y ? -1 : 1;
    }
    return 0;
  }

  function requestSnapshot() {
    sockets.forEach(function (s) { s.wrapper.send(JSON.stringify({ snapshot: true })); });
  }

  // --- converging: message numbers per group, heartbeats, silence -------------------
  var GAP_WAIT_MS = 2000;    // a number may overtake another (two senders): wait this long for the missing one
  var have = {};             // group -> highest number received with none missing before it
  var ahead = {};            // group -> {n: true}: numbers received past a missing one
  var told = {};             // group -> a number a heartbeat said exists
  var gapTimer = null;
  var beatMs = 15000;        // the server's heartbeat period (data-live-beat-s)
  var lastHeard = Date.now();
  var silentAsked = 0;       // when a silent socket was asked for a snapshot
  var stats = { gaps: 0, silences: 0, snapshots: 0 };

  function seqsOf(el) {
    return (el.getAttribute("data-live-seqs") || "").split(/\s+/).filter(Boolean).map(function (pair) {
      var at = pair.lastIndexOf(":");
      return [pair.slice(0, at), Number(pair.slice(at + 1))];
    });
  }

  function behind() {
    return Object.keys(have).some(function (g) {
      return Object.keys(ahead[g] || {}).length > 0 || (told[g] || 0) > have[g];
    });
  }

  function checkSoon() {
    if (gapTimer) return;
    gapTimer = setTimeout(function () {
      gapTimer = null;
      if (behind()) { stats.gaps++; requestSnapshot(); }
    }, GAP_WAIT_MS);
  }

  function numbered(el) {
    var kind = el.getAttribute("data-live");
    var beat = Number(el.getAttribute("data-live-beat-s"));
    if (beat > 0) beatMs = beat * 1000;
    if (kind === "snapshot") stats.snapshots++;
    seqsOf(el).forEach(function (pair) {
      var g = pair[0], n = pair[1];
      if (kind === "snapshot" || have[g] === undefined) {  // the snapshot shows every change up to n
        have[g] = n; ahead[g] = {}; delete told[g];
        return;
      }
      if (kind === "beat") {
        if (n < have[g]) { requestSnapshot(); return; }  // the counter started again: resynchronise
        if (n > have[g]) { told[g] = Math.max(told[g] || 0, n); checkSoon(); }
        return;
      }
      if (n <= have[g]) return;
      if (n === have[g] + 1) {
        have[g] = n;
        while (ahead[g][have[g] + 1]) { delete ahead[g][have[g] + 1]; have[g]++; }
      } else {
        ahead[g][n] = true;
        checkSoon();
      }
    });
  }

  // A socket silent for 2.5 heartbeats: ask for a snapshot; still silent a heartbeat later, reconnect.
  setInterval(function () {
    var open = sockets.filter(function (s) { return s.socket.readyState === 1; });
    if (!open.length) return;
    if (Date.now() - lastHeard < 2.5 * beatMs) { silentAsked = 0; return; }
    if (!silentAsked) {
      silentAsked = Date.now();
      stats.silences++;
      requestSnapshot();
    } else if (Date.now() - silentAsked > beatMs) {
      silentAsked = 0;
      lastHeard = Date.now();
      open.forEach(function (s) { s.socket.close(); });  // htmx:wsClose below reconnects
    }
  }, 1000);

  function insertRow(el) {
    var rows = document.getElementById("job-rows");
    var accept = rows && rows.getAttribute("data-new-rows");
    var isRow = el.id && (el.id.indexOf("job-row-") === 0 || el.id.indexOf("array-row-") === 0);
    var state = el.getAttribute("data-job-state") || el.getAttribute("data-array-state");
    if (!isRow || !accept || (accept !== "any" && accept !== state)) return false;
    el.removeAttribute("hx-swap-oob");
    rows.insertBefore(el, rows.firstElementChild);
    // from the empty state: show the table, hide the "no jobs" card
    var wrap = rows.closest("[hidden]");
    if (wrap) wrap.hidden = false;
    document.querySelectorAll("[data-live-empty]").forEach(function (card) { card.hidden = true; });
    return true;
  }

  // The log box may be a column-reverse flex box (so that without JavaScript it opens at
  // the end); there scrollTop is 0 at the end and negative above it. These work in px from the top.
  function reversed(box) { return getComputedStyle(box).flexDirection === "column-reverse"; }
  function room(box) { return box.scrollHeight - box.clientHeight; }
  function fromTop(box) { return reversed(box) ? room(box) + box.scrollTop : box.scrollTop; }
  function setFromTop(box, px) { box.scrollTop = reversed(box) ? px - room(box) : px; }
  function atEnd(box) { return room(box) - fromTop(box) < 8; }

  function eachLog(fn) {
    document.querySelectorAll("[data-autoscroll]").forEach(function (box) {
      var pre = box.querySelector("pre");
      if (pre) fn(box, pre.id);
    });
  }

  /** Before new text lands: read where the reader is now (the scroll event of a scroll just
   *  made may not have fired yet): at the end, follow it; above it, stay there. */
  function keepPlace() {
    eachLog(function (box, id) {
      follow[id] = atEnd(box);
      if (!follow[id]) kept[id] = fromTop(box);
    });
  }

  /** After: follow the end, or put the reader back where they were. */
  function scrollLogs() {
    eachLog(function (box, id) {
      if (follow[id] === false) setFromTop(box, kept[id] || 0);
      else setFromTop(box, room(box));
    });
  }

  /** The chunk's text as the tail shows lines (jobs/_logline.html): stderr marked, the agent's
   *  time at the start of each line the chunk begins. */
  function logSpan(pre, chunk) {
    var text = chunk.content.textContent;
    var stream = chunk.getAttribute("data-stream");
    var at = chunk.getAttribute("data-at");
    var span = document.createElement("span");
    span.className = "log-line" + (stream === "stderr" ? " log-err" : "");
    if (stream === "stderr") span.title = "stderr";
    // data-open: the text shown ends inside a line ("1") or not ("0"); read once from the text
    if (!pre.hasAttribute("data-open")) {
      var before = pre.textContent;
      pre.setAttribute("data-open", before === "" || before.charAt(before.length - 1) === "\n" ? "0" : "1");
    }
    var atLineStart = pre.getAttribute("data-open") === "0";
    if (text) pre.setAttribute("data-open", text.charAt(text.length - 1) === "\n" ? "0" : "1");
    var parts = text.split("\n");
    parts.forEach(function (part, i) {
      if (i > 0) span.appendChild(document.createTextNode("\n"));
      if (i === parts.length - 1 && part === "") return;  // the chunk ended its last line
      if (at && (i > 0 || atLineStart)) {
        var time = document.createElement("time");
        time.className = "log-ts";
        time.setAttribute("datetime", chunk.getAttribute("data-at-iso") || "");
        time.textContent = at + " ";
        span.appendChild(time);
      }
      span.appendChild(document.createTextNode(part));
    });
    return span;
  }

  function appendChunk(chunk) {
    var pre = document.getElementById(chunk.getAttribute("data-log-chunk"));
    if (!pre) return;
    var shown = Number(pre.getAttribute("data-end"));
    var offset = Number(chunk.getAttribute("data-offset"));
    if (pre.getAttribute("data-attempt") !== chunk.getAttribute("data-attempt")) {
      if (Number(chunk.getAttribute("data-attempt")) > Number(pre.getAttribute("data-attempt"))) requestSnapshot();
      return;
    }
    if (offset > shown) { requestSnapshot(); return; }   // a chunk was missed
    if (offset < shown) return;                            // already shown
    keepPlace();
    pre.appendChild(logSpan(pre, chunk));
    pre.setAttribute("data-end", chunk.getAttribute("data-end"));
    var section = pre.closest("section");
    if (section) {
      // The section's version is "event_seq log_size": keep it at what is shown now.
      var v = versionOf(section) || [0, 0];
      section.setAttribute("data-version", v[0] + " " + chunk.getAttribute("data-end"));
      section.querySelectorAll(".log-empty").forEach(function (p) { p.hidden = true; });
      section.querySelectorAll("a[download][hidden]").forEach(function (a) { a.hidden = false; });
    }
  }

  function announce(text) {
    var region = document.getElementById("live-announcer");
    if (region) region.textContent = text;
  }

  function noticeStateChange(incoming, current) {
    var state = incoming.getAttribute("data-job-state");
    if (!state || !current || current.getAttribute("data-job-state") === state) return;
    var id = incoming.getAttribute("data-job-id");
    var name = incoming.getAttribute("data-job-name") || "";
    var outcome = incoming.getAttribute("data-job-outcome");
    var words = "Job " + id + " (" + name + ") is now " + state + (outcome ? ", " + outcome : "") + ".";
    announce(words);
    var key = id + ":" + state;
    if (!NOTIFY_STATES[state] || announced[key]) return;
    announced[key] = true;
    var title = "Job " + id + " " + NOTIFY_STATES[state] + (outcome ? " (" + outcome + ")" : "");
    if (document.hidden) document.title = "● " + title + " · " + baseTitle;
    if ("Notification" in window && Notification.permission === "granted") {
      // The tag makes two tabs showing the same job raise one notification.
      new Notification(title, { body: name, tag: "e31-job-" + key });
    }
  }

  htmx.defineExtension("live", {
    transformResponse: function (text, xhr) {
      if (xhr) return text;  // an ordinary htmx request, not a pushed message
      var tpl = document.createElement("template");
      tpl.innerHTML = text;
      lastHeard = Date.now();
      Array.from(tpl.content.children).forEach(function (el) {
        if (el.hasAttribute("data-live")) { numbered(el); el.remove(); return; }
        if (el.hasAttribute("data-log-chunk")) { appendChunk(el); el.remove(); return; }
        var current = el.id && document.getElementById(el.id);
        if (!current) {
          if (insertRow(el)) return;
          el.remove();  // a fragment of something this page does not show
          return;
        }
        var have = versionOf(current), got = versionOf(el);
        if (have && got && compare(got, have) < 0) { el.remove(); return; }
        noticeStateChange(el, current);
      });
      return tpl.innerHTML;
    }
  });

  document.addEventListener("htmx:wsOpen", function (e) {
    var socket = e.detail.event.target;
    sockets = sockets.filter(function (s) { return s.socket.readyState <= 1; });
    sockets.push({ wrapper: e.detail.socketWrapper, socket: socket });
    lastHeard = Date.now();
    silentAsked = 0;
    document.querySelectorAll("[data-live-badge]").forEach(function (b) { b.hidden = false; });
    window.e31Live.socket = socket;
  });

  document.addEventListener("htmx:wsClose", function (e) {
    document.querySelectorAll("[data-live-badge]").forEach(function (b) { b.hidden = true; });
    var code = e.detail.event.code;
    // The ws extension itself retries 1006/1011/1012/1013; any other close the
    // server did not ask for (a proxy, a client-side close) is retried here.
    if ([1006, 1011, 1012, 1013].indexOf(code) < 0 && !unloading) {
      setTimeout(function () { e.detail.socketWrapper.reconnect(); }, htmx.config.wsReconnectDelay(0));
    }
  });

  document.addEventListener("htmx:wsBeforeMessage", keepPlace);
  document.addEventListener("htmx:wsAfterMessage", scrollLogs);

  var unloading = false;
  window.addEventListener("pagehide", function () { unloading = true; });

  document.addEventListener("scroll", function (e) {
    var box = e.target;
    if (box.hasAttribute && box.hasAttribute("data-autoscroll")) {
      var pre = box.querySelector("pre");
      if (pre) {
        follow[pre.id] = atEnd(box);
        kept[pre.id] = fromTop(box);
      }
    }
  }, true);

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      document.title = baseTitle;
      requestSnapshot();
    }
  });

  // A budget alert (issue 16) raises one browser notification per account, month and threshold:
  // the banner's key is remembered in localStorage, so other pages and tabs stay quiet.
  function noticeBudgetAlert() {
    var banner = document.querySelector("[data-budget-alert]");
    if (!banner || !("Notification" in window) || Notification.permission !== "granted") return;
    var key = "e31-budget-" + banner.getAttribute("data-budget-alert");
    try {
      if (window.localStorage.getItem(key)) return;
      window.localStorage.setItem(key, "1");
    } catch (e) { return; }
    new Notification("E31: budget alert", { body: banner.textContent.trim(), tag: key });
  }

  document.addEventListener("DOMContentLoaded", function () {
    scrollLogs();
    noticeBudgetAlert();
    if (!("Notification" in window) || Notification.permission !== "default") return;
    var buttons = document.querySelectorAll("[data-notify-consent]");
    buttons.forEach(function (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        Notification.requestPermission().then(function () {
          buttons.forEach(function (b) { b.hidden = true; });
        });
      });
    });
  });

  window.e31Live = { socket: null, requestSnapshot: requestSnapshot, compare: compare, stats: stats, have: have,
                     logFromTop: function () {
    var box = document.querySelector("[data-autoscroll]");
    return box ? { fromTop: fromTop(box), toEnd: room(box) - fromTop(box) } : null;
  } };
})();
