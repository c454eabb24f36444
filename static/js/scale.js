// The scale control of a job (templates/scheduling/_scale_control.html): one number field
// per pod set the job's kind scales (data-scale-count).
//
// Its region is re-rendered by live refreshes (static/js/live.js) while the user may be
// typing: a field the user changed is kept through them, and the confirmation
// (static/js/confirm.js, <form data-confirm>) names the value being submitted when the
// control has one field (data-confirm-template). A value the server would refuse is shown
// as an error beside its field (aria-invalid, aria-describedby) and opens no confirmation.
(function () {
  "use strict";
  const FIELD = "input[data-scale-count]";
  let kept = null;

  function isField(element) {
    return element instanceof HTMLInputElement && element.matches(FIELD);
  }

  function updateConfirm(input) {
    const form = input.form;
    if (!form || !form.dataset.confirmTemplate) return;
    form.dataset.confirm = form.dataset.confirmTemplate.replace("{n}", input.value || "?");
  }

  // What the server would refuse, in its words, checked with the field's own constraints
  // (required, min, max, step): the service keeps its own validation.
  function problem(input) {
    const v = input.validity;
    const path = input.dataset.path || input.name;
    if (v.valueMissing && !v.badInput) return path + ": required: the new count";
    if (v.badInput || v.stepMismatch) return path + ": must be a whole number";
    if (v.rangeUnderflow) return path + ": must be greater than or equal to " + input.min;
    if (v.rangeOverflow) return path + ": must be less than or equal to " + input.max;
    return "";
  }

  function errorOf(input) {
    return document.getElementById(input.id + "-error");
  }

  // Shows (or clears) the field's error beside it; returns whether the value is acceptable.
  function check(input) {
    input.setCustomValidity("");
    const message = problem(input);
    const shown = errorOf(input);
    if (shown) {
      shown.textContent = message;
      shown.hidden = !message;
    }
    if (message) input.setAttribute("aria-invalid", "true");
    else if (input.dataset.checked === "true") input.removeAttribute("aria-invalid");
    input.dataset.checked = "true";
    return !message;
  }

  document.addEventListener("input", function (event) {
    const input = event.target;
    if (!isField(input)) return;
    input.dataset.edited = "true";
    updateConfirm(input);
    // A shown error follows the value as it is corrected.
    const shown = errorOf(input);
    if (shown && !shown.hidden) check(input);
  });

  // checkValidity (static/js/confirm.js, before its dialog) fires "invalid" on each
  // refused field; it does not bubble, so it is caught on the way down.
  document.addEventListener("invalid", function (event) {
    const input = event.target;
    if (isField(input)) check(input);
  }, true);

  // A refresh re-renders the control's region. While the user edits a field, the field
  // itself is kept (hx-preserve, which htmx moves into the new region with moveBefore where
  // the browser has it): its value, focus and caret stay as they were, and it takes the new
  // rendering's attributes. A field the new rendering disables is replaced (the job can no
  // longer be scaled).
  document.addEventListener("htmx:beforeSwap", function (event) {
    const detail = event.detail;
    if (!detail || !detail.target || typeof detail.serverResponse !== "string") return;
    const edited = Array.from(detail.target.querySelectorAll(FIELD)).filter(function (input) {
      return input.dataset.edited === "true" && !input.disabled && input.id;
    });
    if (!edited.length) return;
    const rendered = document.createElement("template");
    rendered.innerHTML = detail.serverResponse;
    let changed = false;
    edited.forEach(function (input) {
      const incoming = rendered.content.getElementById(input.id);
      if (!incoming || incoming.disabled) return;
      Array.from(input.attributes).forEach(function (attr) {
        if (!incoming.hasAttribute(attr.name)) input.removeAttribute(attr.name);
      });
      Array.from(incoming.attributes).forEach(function (attr) {
        if (attr.name !== "value") input.setAttribute(attr.name, attr.value);
      });
      input.dataset.edited = "true";
      incoming.setAttribute("hx-preserve", "true");
      changed = true;
      if (document.activeElement === input) kept = input.id;
    });
    if (changed) detail.serverResponse = rendered.innerHTML;
  });

  document.addEventListener("htmx:afterSwap", function () {
    const focused = kept;
    kept = null;
    if (focused) {
      const input = document.getElementById(focused);
      // Without moveBefore the kept field was taken out of the page and put back: focus it
      // again (a scripted focus puts the caret back where it was).
      if (input && !input.disabled && document.activeElement !== input) input.focus();
    }
    document.querySelectorAll(FIELD).forEach(function (input) {
      if (!input.disabled) updateConfirm(input);
    });
  });

  document.querySelectorAll(FIELD).forEach(function (input) {
    if (!input.disabled) updateConfirm(input);
  });
})();
