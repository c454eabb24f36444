// Times: every <time datetime="…" data-relative> shows "3 min ago" with the absolute time
// as its tooltip, refreshed every 30 s and after htmx swaps.
(function () {
  "use strict";
  const units = [["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  function render(root) {
    (root || document).querySelectorAll("time[data-relative]").forEach(function (el) {
      const at = new Date(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      const seconds = Math.round((at - Date.now()) / 1000);
      let text = format.format(0, "second");
      for (const [unit, size] of units) {
        if (Math.abs(seconds) >= size || unit === "second") {
          text = format.format(Math.round(seconds / size), unit);
          break;
        }
      }
      el.textContent = text;
      el.title = at.toLocaleString();
    });
  }
  document.addEventListener("DOMContentLoaded", function () { render(); });
  document.addEventListener("htmx:afterSwap", function (e) { render(e.target); });
  window.setInterval(render, 30000);
})();
