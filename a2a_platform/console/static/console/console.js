// The console's small script: copy buttons, relative times, and the live feed.
// Live updates refetch the page over HTTP and swap the regions marked data-live;
// the server renders (and escapes) everything, this script never builds HTML.
(function () {
  "use strict";

  // --- Copy buttons -----------------------------------------------------------
  document.addEventListener("click", function (event) {
    const button = event.target.closest("button[data-copy]");
    if (!button) return;
    const source = document.querySelector(button.dataset.copy);
    if (!source) return;
    const text = source.textContent.trim();
    const done = function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { selectText(source); });
    } else {
      selectText(source);
      button.textContent = "Selected: press Ctrl+C";
    }
  });

  function selectText(element) {
    const range = document.createRange();
    range.selectNodeContents(element);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  // --- Relative times ("waiting 3 min") -----------------------------------------
  function compact(seconds) {
    if (seconds < 60) return seconds + " s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min";
    const hours = Math.floor(minutes / 60);
    if (hours < 24) return hours + " h " + (minutes % 60) + " min";
    return Math.floor(hours / 24) + " d " + (hours % 24) + " h";
  }
  function tick() {
    document.querySelectorAll("[data-since]").forEach(function (element) {
      const since = Date.parse(element.dataset.since);
      if (!isNaN(since)) element.textContent = compact(Math.max(0, Math.floor((Date.now() - since) / 1000)));
    });
  }
  setInterval(tick, 10000);

  // --- The inbox (queue pages): the next item is one keystroke away ------------------
  // j / k (or arrow keys outside a box) move between items and focus the item's
  // answer box or its Grant button; Ctrl+Enter sends an answer; Esc leaves a box.
  // After an action the queue reloads with #next: the oldest item waiting is focused.
  const inbox = document.body.dataset.inbox ? document.getElementById("queue-rows") : null;

  function items() { return inbox ? Array.from(inbox.querySelectorAll(".inbox-item")) : []; }
  function focusItem(item) {
    if (!item) return;
    const target = item.querySelector("[data-primary]") || item;
    target.focus();
    item.scrollIntoView({ block: "nearest" });
  }
  function typing(element) {
    return element && (element.isContentEditable || /^(TEXTAREA|INPUT|SELECT)$/.test(element.tagName));
  }
  if (inbox) {
    document.addEventListener("keydown", function (event) {
      const active = document.activeElement;
      if (typing(active)) {
        if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && active.form) {
          event.preventDefault();
          active.form.requestSubmit();
        } else if (event.key === "Escape") {
          active.blur();
          const item = active.closest(".inbox-item");
          if (item) item.focus();
        }
        return;
      }
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      const step = { j: 1, ArrowDown: 1, k: -1, ArrowUp: -1 }[event.key];
      if (!step) return;
      const all = items();
      if (!all.length) return;
      const current = active ? active.closest(".inbox-item") : null;
      const index = all.indexOf(current);
      const next = index < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, index + step));
      event.preventDefault();
      focusItem(all[next]);
    });
    if (window.location.hash === "#next") focusItem(items()[0]);
  }
  // One decision open at a time: opening Deny closes Grant and the other way round.
  document.addEventListener("toggle", function (event) {
    const opened = event.target;
    if (!(opened instanceof HTMLDetailsElement) || !opened.open || !opened.classList.contains("confirm")) return;
    opened.parentElement.querySelectorAll("details.confirm[open]").forEach(function (other) {
      if (other !== opened) other.open = false;
    });
    const confirm = opened.querySelector("button[type=submit]");
    if (confirm) confirm.focus();
  }, true);

  // --- Live regions ---------------------------------------------------------------
  // data-live="whole": replaced when its data-version changes (or has none).
  // data-live="keyed": children with data-key are kept when their data-version is
  // unchanged, so a row someone is typing into is not rebuilt under them.
  function patchRegion(current, fresh) {
    if (current.dataset.live === "keyed") {
      const old = new Map();
      Array.from(current.children).forEach(function (child) { old.set(child.dataset.key, child); });
      const wanted = Array.from(fresh.children).map(function (child) {
        const kept = old.get(child.dataset.key);
        if (kept && kept.dataset.version === child.dataset.version) return kept;
        return document.importNode(child, true);
      });
      wanted.forEach(function (node, index) {
        if (current.children[index] !== node) current.insertBefore(node, current.children[index] || null);
      });
      while (current.children.length > wanted.length) current.lastElementChild.remove();
      return;
    }
    if (current.dataset.version !== undefined && current.dataset.version === fresh.dataset.version) return;
    current.replaceWith(document.importNode(fresh, true));
  }

  let fetching = false;
  let again = false;
  function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Console-Live": "1" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) return;
        const doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live][id]").forEach(function (current) {
          const fresh = doc.getElementById(current.id);
          if (fresh) patchRegion(current, fresh);
        });
        document.body.dataset.refreshed = String(Date.now());
      })
      .catch(function () { /* the next event or reconnect tries again */ })
      .finally(function () {
        fetching = false;
        // Bursts of events collapse into one more fetch shortly after.
        if (again) { again = false; setTimeout(refresh, 200); }
      });
  }

  // --- The tenant feed --------------------------------------------------------------
  const feed = document.body.dataset.feed;
  if (!feed) return;
  const onlyTask = document.body.dataset.liveTask || null;
  const status = document.getElementById("live-state");
  let delay = 1000;

  function setState(state, text) {
    document.body.dataset.liveState = state;
    if (status) status.textContent = text;
  }

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + window.location.host + feed);
    setState("connecting", "Connecting…");
    socket.onopen = function () {
      setState("open", "● Live");
      delay = 1000;
      // Whatever happened before the socket opened (or while it was down): one catch-up fetch.
      refresh();
    };
    socket.onmessage = function (event) {
      let note;
      try { note = JSON.parse(event.data); } catch (error) { return; }
      if (onlyTask && note.task !== onlyTask) return;
      refresh();
    };
    socket.onclose = function (event) {
      if (event.code === 4404) { setState("refused", "Live updates unavailable"); return; }
      if (event.code === 4403) { setState("refused", "You no longer have access to this tenant"); return; }
      // The sign-in this socket had is over. This browser may hold a new one (a password
      // changed here): a new socket finds out, and is refused with 4402 if not. A moment
      // later, so that a sign-out has deleted the session by the time the socket opens.
      if (event.code === 4401) { setState("closed", "Checking the sign-in…"); setTimeout(connect, 1000); return; }
      if (event.code === 4402) { setState("refused", "Signed out"); return; }
      setState("closed", "Offline, retrying…");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
  }
  connect();
})();
