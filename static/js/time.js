// Times: every <time datetime="…" data-relative> shows "3 min ago" with the absolute time
// as its tooltip, rendered again after htmx swaps and as time passes: every second while one
// of them is less than an hour away (its text changes that often), else every 30 s.
(function () {
  "use strict";
  const units = [["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  const FAST_MS = 1000;
  const SLOW_MS = 30000;
  let timer = null;

  // The shortest distance from now, in seconds, among the times rendered.
  function render() {
    let nearest = Infinity;
    document.querySelectorAll("time[data-relative]").forEach(function (el) {
      const at = new Date(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      const seconds = Math.round((at - Date.now()) / 1000);
      nearest = Math.min(nearest, Math.abs(seconds));
      let text = format.format(0, "second");
      for (const [unit, size] of units) {
        if (Math.abs(seconds) >= size || unit === "second") {
          text = format.format(Math.round(seconds / size), unit);
          break;
        }
      }
      if (el.textContent !== text) el.textContent = text; // no needless DOM writes
      const title = at.toLocaleString();
      if (el.title !== title) el.title = title;
    });
    return nearest;
  }

  function tick() {
    const nearest = render();
    window.clearTimeout(timer);
    timer = window.setTimeout(tick, nearest < 3600 ? FAST_MS : SLOW_MS);
  }

  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("htmx:afterSwap", tick); // new times may be recent ones
})();
