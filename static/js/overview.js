// The overview's history chart (Chart.js): drawn from the JSON the server embeds in
// #overview-history-data, and drawn again whenever htmx swaps the region in.
(function () {
  "use strict";
  let chart = null;

  function draw() {
    const data = document.getElementById("overview-history-data");
    const canvas = document.getElementById("overview-history-chart");
    if (chart) { chart.destroy(); chart = null; }
    if (!data || !canvas || !window.Chart) return;
    const history = JSON.parse(data.textContent);
    const styles = getComputedStyle(document.documentElement);
    const fg = styles.getPropertyValue("--muted").trim() || "#888";
    const palette = ["#2f6fde", "#e8710a", "#1e8e3e", "#8e44ad", "#c5221f", "#12b5cb"];
    chart = new window.Chart(canvas, {
      type: "line",
      data: {
        labels: history.labels.map(function (t) { return new Date(t).toLocaleTimeString(); }),
        datasets: history.datasets.map(function (ds, i) {
          const colour = palette[Math.floor(i / 2) % palette.length];
          return {
            label: ds.label, data: ds.data, borderColor: colour, backgroundColor: colour,
            borderDash: ds.kind === "pending" ? [5, 4] : [], pointRadius: 0, spanGaps: true,
            tension: 0.2,
          };
        }),
      },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        interaction: { mode: "index", intersect: false },
        scales: {
          x: { ticks: { color: fg, maxTicksLimit: 8 } },
          y: { beginAtZero: true, ticks: { color: fg, precision: 0 } },
        },
        plugins: { legend: { labels: { color: fg } } },
      },
    });
  }

  document.addEventListener("DOMContentLoaded", draw);
  document.body.addEventListener("htmx:afterSettle", function (event) {
    if (event.target && event.target.id === "overview-history") draw();
  });
})();
