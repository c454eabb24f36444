// Charts of stored samples (Chart.js): every <figure data-chart-url> (the partial
// templates/scheduling/_chart.html) is drawn from the JSON at its URL
// (scheduling/web/charts.py) and fetched again once per sampling interval.
//
// Lines are steps, never curves: a sample says what was true at its moment (or during the
// interval it closes), not how the value moved in between. The x axis is linear in epoch
// milliseconds, so unevenly spaced samples sit at their real times; a null point is a gap
// in the samples and breaks the line. Each panel has a table of its latest values, the
// chart's text alternative.
(function () {
  "use strict";
  const COLOURS = {
    within: "#2f6fde", borrowed: "#e8710a", nominal: "#555555",
    p50: "#1e8e3e", p90: "#c5221f", total: "#2f6fde",
  };
  const PALETTE = ["#8e44ad", "#12b5cb", "#1e8e3e", "#e8710a", "#c5221f", "#2f6fde"];
  const BINARY = [["Ei", 2 ** 60], ["Pi", 2 ** 50], ["Ti", 2 ** 40], ["Gi", 2 ** 30],
    ["Mi", 2 ** 20], ["Ki", 2 ** 10]];
  const state = new WeakMap(); // figure -> {charts, timer, key}

  function timeText(ms, withSeconds) {
    const options = { hour: "2-digit", minute: "2-digit" };
    if (withSeconds) options.second = "2-digit";
    return new Date(ms).toLocaleTimeString([], options);
  }

  function tickText(value, unit) {
    if (unit === "bytes") {
      for (const [suffix, size] of BINARY) {
        if (Math.abs(value) >= size) return +(value / size).toFixed(1) + suffix;
      }
      return String(value);
    }
    if (unit === "seconds") {
      if (value >= 3600) return +(value / 3600).toFixed(1) + " h";
      if (value >= 60) return +(value / 60).toFixed(1) + " min";
      return value + " s";
    }
    return String(+value.toFixed(3));
  }

  function colour(series, index) {
    if (series.kind === "pending" || series.kind === "admitted") {
      return PALETTE[Math.floor(index / 2) % PALETTE.length];
    }
    return COLOURS[series.kind] || PALETTE[index % PALETTE.length];
  }

  function dataset(panel, series, index, stacked) {
    const c = colour(series, index);
    const ds = {
      label: series.label,
      data: series.points.map(function (p) { return { x: p[0], y: p[1] }; }),
      borderColor: c, backgroundColor: c,
      stepped: panel.stepped, tension: 0, spanGaps: false,
      pointRadius: 2, pointHoverRadius: 4, borderWidth: 2,
      borderDash: series.kind === "nominal" || series.kind === "pending" ? [6, 4] : [],
      hidden: !!series.hidden,
    };
    if (series.kind === "nominal") ds.order = -1; // the reference line on top of the areas
    if (stacked) {
      // Within nominal and borrowed stack to the usage; the nominal quota is its own line.
      ds.stack = series.kind === "nominal" ? "quota" : "usage";
      if (series.kind === "within") ds.fill = "origin";
      if (series.kind === "borrowed") ds.fill = "-1";
      if (ds.fill) ds.backgroundColor = c + "55";
    }
    return ds;
  }

  function summary(panel) {
    const at = panel.latest.at ? " at " + timeText(panel.latest.at, true) : "";
    return panel.title + at + ": " + panel.latest.values.map(function (v) {
      return v.label + " " + v.text;
    }).join(", ");
  }

  function fillTable(tbody, panel) {
    tbody.replaceChildren();
    panel.latest.values.forEach(function (v) {
      const row = tbody.insertRow();
      const name = document.createElement("th");
      name.scope = "row";
      name.textContent = v.label;
      row.appendChild(name);
      const cell = row.insertCell();
      cell.className = "num";
      cell.textContent = v.text;
    });
  }

  function table(panel) {
    const details = document.createElement("details");
    const label = document.createElement("summary");
    details.appendChild(label);
    const t = document.createElement("table");
    const head = t.createTHead().insertRow();
    ["Series", "Latest value"].forEach(function (text) {
      const th = document.createElement("th");
      th.scope = "col";
      th.textContent = text;
      head.appendChild(th);
    });
    t.appendChild(document.createElement("tbody"));
    details.appendChild(t);
    return details;
  }

  function updateText(box, panel) {
    const at = panel.latest.at ? " (" + timeText(panel.latest.at, true) + ")" : "";
    box.querySelector("summary").textContent = "Latest values" + at;
    fillTable(box.querySelector("tbody"), panel);
    box.closest(".chart-panel").querySelector("canvas").setAttribute("aria-label", summary(panel));
  }

  function xBounds(data) {
    const now = Date.now();
    return { min: now - data.hours * 3600 * 1000, max: now };
  }

  // Ticks on round times: about six across the window, at multiples of a whole step.
  const STEPS_MINUTES = [5, 10, 15, 30, 60, 120, 180, 240, 360];
  function roundTicks(min, max, hours) {
    const minutes = STEPS_MINUTES.find(function (m) { return hours * 60 / m <= 7; }) || 360;
    const step = minutes * 60 * 1000;
    // Multiples of the step in local wall-clock time, not in UTC.
    const offset = new Date(min).getTimezoneOffset() * 60 * 1000;
    const ticks = [];
    for (let t = Math.ceil((min - offset) / step) * step + offset; t <= max; t += step) {
      ticks.push({ value: t });
    }
    return ticks;
  }

  function options(panel, data, stacked) {
    const styles = getComputedStyle(document.documentElement);
    const fg = styles.getPropertyValue("--muted").trim() || "#888";
    const bounds = xBounds(data);
    return {
      animation: false, responsive: true, maintainAspectRatio: false, normalized: true,
      interaction: { mode: "nearest", axis: "x", intersect: false },
      scales: {
        x: {
          type: "linear", min: bounds.min, max: bounds.max,
          ticks: { color: fg, callback: function (v) { return timeText(v); } },
          afterBuildTicks: function (axis) { axis.ticks = roundTicks(axis.min, axis.max, data.hours); },
        },
        y: {
          beginAtZero: true, stacked: stacked,
          ticks: { color: fg, callback: function (v) { return tickText(v, panel.unit); } },
        },
      },
      plugins: {
        legend: { labels: { color: fg } },
        tooltip: {
          callbacks: {
            title: function (items) { return items.length ? timeText(items[0].parsed.x, true) : ""; },
            label: function (item) {
              return item.dataset.label + ": " + tickText(item.parsed.y, panel.unit);
            },
          },
        },
      },
    };
  }

  function build(container, data) {
    const charts = [];
    container.replaceChildren();
    data.panels.forEach(function (panel, index) {
      const box = document.createElement("div");
      box.className = "chart-panel";
      box.dataset.unit = panel.unit;
      if (data.panels.length > 1 || !container.closest("figure")) {
        const heading = document.createElement("h3");
        heading.textContent = panel.title;
        box.appendChild(heading);
      }
      const holder = document.createElement("div");
      holder.className = "chart-canvas";
      const canvas = document.createElement("canvas");
      canvas.setAttribute("role", "img");
      holder.appendChild(canvas);
      box.appendChild(holder);
      const text = table(panel);
      box.appendChild(text);
      container.appendChild(box);
      updateText(text, panel);
      const stacked = panel.series.some(function (s) { return s.kind === "within"; });
      charts.push(new window.Chart(canvas, {
        type: "line",
        data: { datasets: panel.series.map(function (s, i) { return dataset(panel, s, i, stacked); }) },
        options: options(panel, data, stacked),
      }));
      charts[index].kueuePanel = box;
    });
    return charts;
  }

  // Draw ``data`` into ``container``: in place when the panels are the same ones (an open
  // data table stays open), else from scratch.
  function render(container, data, empty) {
    const previous = state.get(container) || { charts: [] };
    const key = data.panels.map(function (p) {
      return p.title + "|" + p.series.map(function (s) { return s.label; }).join("|");
    }).join("\n");
    if (!data.panels.length) {
      previous.charts.forEach(function (c) { c.destroy(); });
      const p = document.createElement("p");
      p.className = "muted chart-status";
      p.textContent = empty || "No samples in this window yet.";
      container.replaceChildren(p);
      state.set(container, { charts: [], key: key });
      return;
    }
    // In place only while the canvases are still this container's (a swap of the region
    // around the figure may have replaced them).
    const intact = previous.charts.length && previous.charts.every(function (c) {
      return container.contains(c.canvas);
    });
    if (previous.key === key && intact) {
      const bounds = xBounds(data);
      data.panels.forEach(function (panel, i) {
        const chart = previous.charts[i];
        panel.series.forEach(function (s, j) {
          chart.data.datasets[j].data = s.points.map(function (p) { return { x: p[0], y: p[1] }; });
        });
        chart.options.scales.x.min = bounds.min;
        chart.options.scales.x.max = bounds.max;
        chart.update("none");
        updateText(chart.kueuePanel.querySelector("details"), panel);
      });
      return;
    }
    previous.charts.forEach(function (c) { c.destroy(); });
    state.set(container, { charts: build(container, data), key: key });
  }

  function status(container, text) {
    const p = document.createElement("p");
    p.className = "muted chart-status";
    p.setAttribute("role", "status");
    p.textContent = text;
    container.replaceChildren(p);
  }

  function load(figure) {
    const container = figure.querySelector("[data-chart-panels]");
    if (!container || !window.Chart || !document.contains(figure)) return;
    const own = state.get(figure) || {};
    window.clearTimeout(own.timer);
    figure.dataset.chartState = figure.dataset.chartState || "loading";
    const url = new URL(figure.dataset.chartUrl, window.location.href);
    if (figure.dataset.chartHours) url.searchParams.set("hours", figure.dataset.chartHours);
    fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      })
      .then(function (result) {
        if (!result.ok) {
          const errors = result.body.errors || {};
          status(container, "Chart unavailable: " + Object.keys(errors).map(function (f) {
            return f + ": " + errors[f].join(" ");
          }).join("; "));
          return;
        }
        const empty = "No samples yet: usage is sampled every " + result.body.interval_seconds + " s.";
        render(container, result.body, empty);
        figure.dataset.chartState = "drawn";
        schedule(figure, result.body.interval_seconds);
      })
      .catch(function () {
        status(container, "Chart unavailable: the server did not answer; retrying.");
        schedule(figure, 30);
      });
  }

  function schedule(figure, seconds) {
    const own = state.get(figure) || {};
    own.timer = window.setTimeout(function () {
      if (document.contains(figure)) load(figure);
    }, Math.max(seconds, 5) * 1000);
    state.set(figure, own);
  }

  function loadAll(root) {
    root.querySelectorAll("figure[data-chart-url]").forEach(function (figure) {
      if (!figure.dataset.chartState) load(figure);
    });
  }

  window.kueuewebCharts = { render: render };
  document.addEventListener("DOMContentLoaded", function () { loadAll(document); });
  document.addEventListener("htmx:afterSettle", function (event) {
    if (event.target && event.target.querySelectorAll) loadAll(event.target);
  });
})();
