// The workload and job lists: the column chooser and group-by apply as soon as they
// change; group rows fold and unfold; the bulk form counts the rows selected (with a
// select-all for the page) and names the action and count in its confirmation. Selections
// and folded groups survive the live refreshes that replace the table.
(function () {
  "use strict";
  const selected = new Set();
  const folded = new Set();

  function boxes() { return Array.from(document.querySelectorAll("input.bulk-select")); }

  function syncBulk() {
    const form = document.getElementById("bulk-form");
    const all = document.getElementById("bulk-select-all");
    const onPage = boxes();
    onPage.forEach(function (box) { box.checked = selected.has(box.value); });
    // Rows gone from the page (finished, deleted, filtered out) leave the selection.
    const present = new Set(onPage.map(function (box) { return box.value; }));
    selected.forEach(function (id) { if (!present.has(id)) selected.delete(id); });
    if (all) {
      all.checked = onPage.length > 0 && selected.size === onPage.length;
      all.indeterminate = selected.size > 0 && selected.size < onPage.length;
    }
    if (!form) return;
    const count = document.getElementById("bulk-count");
    const apply = document.getElementById("bulk-apply");
    const action = document.getElementById("bulk-action");
    if (count) count.textContent = String(selected.size);
    if (apply) apply.disabled = selected.size === 0;
    const label = action && action.selectedOptions[0] ? action.selectedOptions[0].textContent : "Act on";
    form.dataset.confirm = label + ": " + selected.size + " selected " + (form.dataset.noun || "rows") + "?";
  }

  function applyFolds() {
    document.querySelectorAll("[data-group-toggle]").forEach(function (button) {
      button.setAttribute("aria-expanded", folded.has(button.dataset.groupToggle) ? "false" : "true");
    });
    document.querySelectorAll("tr[data-group]").forEach(function (row) {
      row.hidden = folded.has(row.dataset.group);
    });
  }

  document.addEventListener("change", function (event) {
    const target = event.target;
    if (!(target instanceof HTMLElement)) return;
    if (target.matches("input.bulk-select")) {
      if (target.checked) selected.add(target.value); else selected.delete(target.value);
      syncBulk();
    } else if (target.id === "bulk-select-all") {
      boxes().forEach(function (box) {
        if (target.checked) selected.add(box.value); else selected.delete(box.value);
      });
      syncBulk();
    } else if (target.id === "bulk-action") {
      syncBulk();
    } else if (target.matches("[data-apply-on-change]") && target.form) {
      target.form.requestSubmit();
    }
  });

  document.addEventListener("click", function (event) {
    const button = event.target instanceof Element ? event.target.closest("[data-group-toggle]") : null;
    if (!button) return;
    const group = button.dataset.groupToggle;
    if (folded.has(group)) folded.delete(group); else folded.add(group);
    applyFolds();
  });

  document.body.addEventListener("htmx:afterSettle", function () { syncBulk(); applyFolds(); });
  syncBulk();
})();
