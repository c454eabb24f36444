// The scale control of a job (templates/scheduling/_scale_control.html).
//
// Its region is re-rendered by live refreshes (static/js/live.js) while the user may be
// typing: a value the user changed is carried over to the new input, and the confirmation
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

  document.addEventListener("htmx:beforeSwap", function (event) {
    const target = event.detail && event.detail.target;
    const input = document.getElementById(INPUT);
    if (!input || !target || !target.contains(input)) return;
    kept = input.dataset.edited === "true" && !input.disabled
      ? { value: input.value, focused: document.activeElement === input } : null;
  });

  document.addEventListener("htmx:afterSwap", function () {
    const state = kept;
    kept = null;
    const input = document.getElementById(INPUT);
    if (!input || input.disabled) return; // gone, or the job can no longer be scaled
    if (state) {
      input.value = state.value;
      input.dataset.edited = "true";
      if (state.focused && document.activeElement !== input) input.focus();
    }
    updateConfirm(input);
  });

  const input = document.getElementById(INPUT);
  if (input && !input.disabled) updateConfirm(input);
})();
