// Live updates: one WebSocket per page, to /ws/live/.
//
// The page names the scheduling domains it shows in <body data-live-clusters="1 2">. When
// the server says one of them changed, every element marked data-live-refresh is fetched
// again (htmx: hx-get with hx-trigger="live-refresh") - at most once per second, however
// many changes arrive. The socket reconnects with back-off (1 s doubling to 30 s, with
// jitter; at once when the browser comes back online) and the page shows a "reconnecting"
// banner meanwhile; once subscribed again it refreshes, to catch up on what it missed.
(function () {
  "use strict";
  const body = document.body;
  const clusters = (body.dataset.liveClusters || "")
    .split(/\s+/).filter(Boolean).map(Number).filter(Number.isInteger);
  if (!clusters.length || !("WebSocket" in window)) return;

  const banner = document.getElementById("live-status");
  const REFRESH_INTERVAL_MS = 1000;
  const MAX_DELAY_MS = 30000;
  let attempt = 0;
  let reconnectTimer = null;
  let lastRefresh = 0;
  let refreshTimer = null;

  function setState(state) {
    body.dataset.liveState = state;
    if (!banner) return;
    banner.hidden = state === "live";
    banner.textContent = state === "reconnecting" ? "Live updates lost: reconnecting…" : "";
  }

  function refresh() {
    refreshTimer = null;
    lastRefresh = Date.now();
    document.querySelectorAll("[data-live-refresh]").forEach(function (el) {
      if (window.htmx) window.htmx.trigger(el, "live-refresh");
    });
    document.dispatchEvent(new CustomEvent("live:refreshed"));
  }

  function scheduleRefresh() {
    if (refreshTimer !== null) return; // a refresh is already due: coalesce
    const wait = Math.max(0, lastRefresh + REFRESH_INTERVAL_MS - Date.now());
    refreshTimer = window.setTimeout(refresh, wait);
  }

  function connect() {
    reconnectTimer = null;
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/live/");
    socket.addEventListener("open", function () {
      socket.send(JSON.stringify({ subscribe: clusters }));
    });
    socket.addEventListener("message", function (event) {
      let message;
      try { message = JSON.parse(event.data); } catch (e) { return; }
      if (message.type === "subscribed") {
        if (attempt > 0) scheduleRefresh(); // catch up on what was missed while away
        attempt = 0;
        setState("live");
      } else if (message.type === "changed") {
        scheduleRefresh();
      }
    });
    socket.addEventListener("close", function (event) {
      if (event.code === 4401) { setState("refused"); return; } // signed out: no retry
      setState("reconnecting");
      // Jitter (50-100 % of the step) spreads the reconnections of many pages after a
      // server or Redis restart.
      const step = Math.min(MAX_DELAY_MS, 1000 * Math.pow(2, attempt));
      attempt += 1;
      reconnectTimer = window.setTimeout(connect, step * (0.5 + Math.random() / 2));
    });
  }

  // Back online (laptop woke up, network returned): try at once instead of waiting out
  // the back-off.
  window.addEventListener("online", function () {
    if (reconnectTimer === null || body.dataset.liveState !== "reconnecting") return;
    window.clearTimeout(reconnectTimer);
    reconnectTimer = null;
    connect();
  });

  setState("connecting");
  connect();
})();
