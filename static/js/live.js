// Live updates: one WebSocket per page, to /ws/live/.
//
// The page names the scheduling domains it shows in <body data-live-clusters="1 2">. When
// the server says one of them changed, every element marked data-live-refresh is fetched
// again (htmx: hx-get with hx-trigger="live-refresh") - at most once per second, however
// many changes arrive - and morphed in place (idiomorph), so focus, selection and scroll
// survive. The user may pause the refreshes; resuming catches up once.
//
// The socket reconnects with back-off (1 s doubling, capped at 3 s, with jitter; at once when
// the browser comes back online) and the page shows a "reconnecting" banner meanwhile; once
// subscribed again it says so briefly and refreshes, to catch up on what it missed.
//
// A refresh answered 404 means the page's object was deleted: the page says so, greys out
// what it shows and stops refreshing (no stream of 404s).
(function () {
  "use strict";
  const body = document.body;
  const clusters = (body.dataset.liveClusters || "")
    .split(/\s+/).filter(Boolean).map(Number).filter(Number.isInteger);
  if (!clusters.length || !("WebSocket" in window)) return;

  const banner = document.getElementById("live-status");
  const goneBanner = document.getElementById("live-gone");
  const controls = document.getElementById("live-controls");
  const pauseButton = document.getElementById("live-pause");
  const updated = document.getElementById("live-updated");
  const REFRESH_INTERVAL_MS = 1000;
  const FIRST_DELAY_MS = 1000;
  const MAX_DELAY_MS = 3000;
  const RECONNECTED_NOTICE_MS = 4000;
  let socket = null;
  let attempt = 0;
  let reconnectTimer = null;
  let noticeTimer = null;
  let lastRefresh = 0;
  let refreshTimer = null;
  let paused = false;
  let gone = false;
  let leaving = false;
  let updatedAt = Date.now(); // the page's data is as fresh as the page

  function setState(state) {
    body.dataset.liveState = state;
    if (!banner) return;
    window.clearTimeout(noticeTimer);
    if (state === "reconnecting") {
      banner.textContent = "Live updates lost: reconnecting…";
      banner.hidden = false;
    } else if (state === "live" && attempt > 0) {
      banner.textContent = "Reconnected: live updates are back.";
      banner.hidden = false;
      noticeTimer = window.setTimeout(function () { banner.hidden = true; },
                                      RECONNECTED_NOTICE_MS);
    } else {
      banner.hidden = true;
      banner.textContent = "";
    }
  }

  function refresh() {
    refreshTimer = null;
    if (paused || gone) return;
    lastRefresh = Date.now();
    document.querySelectorAll("[data-live-refresh]").forEach(function (el) {
      if (window.htmx) window.htmx.trigger(el, "live-refresh");
    });
    document.dispatchEvent(new CustomEvent("live:refreshed"));
  }

  function scheduleRefresh() {
    if (refreshTimer !== null || paused || gone) return; // due already, or not wanted
    const wait = Math.max(0, lastRefresh + REFRESH_INTERVAL_MS - Date.now());
    refreshTimer = window.setTimeout(refresh, wait);
  }

  function connect() {
    reconnectTimer = null;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/live/");
    const own = socket;
    own.addEventListener("open", function () {
      own.send(JSON.stringify({ subscribe: clusters }));
    });
    own.addEventListener("message", function (event) {
      let message;
      try { message = JSON.parse(event.data); } catch (e) { return; }
      if (message.type === "subscribed") {
        setState("live");
        if (attempt > 0) scheduleRefresh(); // catch up on what was missed while away
        attempt = 0;
      } else if (message.type === "changed") {
        scheduleRefresh();
      }
    });
    own.addEventListener("close", function (event) {
      if (gone || leaving) return;
      if (event.code === 4401) { setState("refused"); return; } // signed out: no retry
      setState("reconnecting");
      // Jitter (50-100 % of the step) spreads the reconnections of many pages after a
      // server or Redis restart; the cap keeps a page at most a few seconds behind a server
      // that came back.
      const step = Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * Math.pow(2, attempt));
      attempt += 1;
      reconnectTimer = window.setTimeout(connect, step * (0.5 + Math.random() / 2));
    });
  }

  function setPaused(value) {
    paused = value;
    body.dataset.livePaused = String(paused);
    if (pauseButton) {
      pauseButton.setAttribute("aria-pressed", String(paused));
      pauseButton.textContent = paused ? "Resume live updates" : "Pause live updates";
    }
    if (!paused) refresh(); // one catch-up refresh
    showUpdated();
  }

  function stopAsGone() {
    if (gone) return;
    gone = true;
    window.clearTimeout(refreshTimer);
    window.clearTimeout(reconnectTimer);
    if (socket !== null) socket.close(1000);
    body.dataset.liveState = "gone";
    body.classList.add("live-gone");
    if (banner) banner.hidden = true;
    if (controls) controls.hidden = true;
    if (goneBanner) {
      const kind = body.dataset.liveObject;
      goneBanner.textContent = (kind ? "This " + kind + " was deleted." :
        "What this page shows was deleted.") +
        " The page shows it as it was when last refreshed, and is no longer updated.";
      goneBanner.hidden = false;
    }
  }

  function showUpdated() {
    if (!updated) return;
    const seconds = Math.max(0, Math.floor((Date.now() - updatedAt) / 1000));
    const text = (paused ? "Paused; updated " : "Updated ") + seconds + " s ago";
    if (updated.textContent !== text) updated.textContent = text;
    updated.dataset.seconds = String(seconds);
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    const elt = event.detail.elt;
    if (!elt || !elt.hasAttribute("data-live-refresh") || event.detail.isError) return;
    // Morph the region (its own hx-swap says inner or outer) instead of replacing it.
    const spec = (event.detail.swapOverride || elt.getAttribute("hx-swap") || "innerHTML")
      .trim().split(/\s+/);
    if (!spec[0].startsWith("morph")) spec[0] = "morph:" + spec[0];
    event.detail.swapOverride = spec.join(" ");
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    const elt = event.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-live-refresh")) {
      updatedAt = Date.now();
      showUpdated();
    }
  });
  document.addEventListener("htmx:responseError", function (event) {
    const elt = event.detail.elt;
    const status = event.detail.xhr ? event.detail.xhr.status : 0;
    if (elt && elt.hasAttribute("data-live-refresh") && (status === 404 || status === 410)) {
      stopAsGone();
    }
  });

  // Back online (laptop woke up, network returned): try at once instead of waiting out
  // the back-off.
  window.addEventListener("online", function () {
    if (reconnectTimer === null || body.dataset.liveState !== "reconnecting") return;
    window.clearTimeout(reconnectTimer);
    reconnectTimer = null;
    connect();
  });
  // Leaving the page: close the socket ourselves rather than letting it drop mid-message.
  window.addEventListener("pagehide", function () {
    leaving = true;
    window.clearTimeout(reconnectTimer);
    if (socket !== null) socket.close(1000);
  });
  window.addEventListener("pageshow", function (event) {
    if (!event.persisted || gone) return; // back from the browser's page cache: resume
    leaving = false;
    attempt = 1; // counts as a reconnection: catch up
    connect();
  });

  if (pauseButton) {
    pauseButton.addEventListener("click", function () { setPaused(!paused); });
  }
  if (controls) controls.hidden = false;
  showUpdated();
  window.setInterval(showUpdated, 1000);
  setState("connecting");
  connect();
})();
