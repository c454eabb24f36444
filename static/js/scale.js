// The scale control of a job (templates/scheduling/_scale_control.html).
//
// Its region is re-rendered by live refreshes (static/js/live.js) while the user may be
// typing: a field the user changed is kept through them, and the confirmation
// (static/js/confirm.js, <form data-confirm>) names the value being submitted.
(function () {
  "use strict";
  const INPUT = "scale-parallelism";
  let kept = null;

  function updateConfirm(input) {
    const form = input.form;
    if (!form || !form.dataset.confirmTemplate) return;
    form.dataset.confirm = form.dataset.confirmTemplate.replace("{n}", input.value || "?");
  }

  document.addEventListener("input", function (event) {
    const input = event.target;
    if (!(input instanceof HTMLInputElement) || input.id !== INPUT) return;
    input.dataset.edited = "true";
    updateConfirm(input);
  });

  // A refresh re-renders the control's region. While the user edits the field, the field
  // itself is kept (hx-preserve, which htmx moves into the new region with moveBefore where
  // the browser has it): its value, focus and caret stay as they were, and it takes the new
  // rendering's attributes. A field the new rendering disables is replaced (the job can no
  // longer be scaled).
  document.addEventListener("htmx:beforeSwap", function (event) {
    const detail = event.detail;
    const input = document.getElementById(INPUT);
    if (!input || !detail || !detail.target || !detail.target.contains(input)) return;
    if (input.dataset.edited !== "true" || input.disabled) return;
    if (typeof detail.serverResponse !== "string") return;
    const rendered = document.createElement("template");
    rendered.innerHTML = detail.serverResponse;
    const incoming = rendered.content.getElementById(INPUT);
    if (!incoming || incoming.disabled) return;
    Array.from(input.attributes).forEach(function (attr) {
      if (!incoming.hasAttribute(attr.name)) input.removeAttribute(attr.name);
    });
    Array.from(incoming.attributes).forEach(function (attr) {
      if (attr.name !== "value") input.setAttribute(attr.name, attr.value);
    });
    input.dataset.edited = "true";
    incoming.setAttribute("hx-preserve", "true");
    detail.serverResponse = rendered.innerHTML;
    kept = document.activeElement === input;
  });

  document.addEventListener("htmx:afterSwap", function () {
    const focused = kept;
    kept = null;
    const input = document.getElementById(INPUT);
    if (!input || input.disabled) return; // gone, or the job can no longer be scaled
    // Without moveBefore the kept field was taken out of the page and put back: focus it
    // again (a scripted focus puts the caret back where it was).
    if (focused && document.activeElement !== input) input.focus();
    updateConfirm(input);
  });

  const input = document.getElementById(INPUT);
  if (input && !input.disabled) updateConfirm(input);
})();
