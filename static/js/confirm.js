// Confirmation before a control acts: every <form data-confirm="question"> opens the
// page's <dialog id="confirm-dialog"> first and submits only on "Confirm" (#confirm-yes).
// A form whose fields are invalid (HTML constraint validation) gets no dialog.
// Delegated on the document, so forms swapped in by htmx are covered too. Without this
// script (or <dialog> support) the forms fall back to the browser's confirm().
(function () {
  "use strict";
  const dialog = document.getElementById("confirm-dialog");
  const message = document.getElementById("confirm-message");
  let pending = null;

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
    if (form.dataset.confirmed === "yes") { delete form.dataset.confirmed; return; }
    event.preventDefault();
    // A value the form's own constraints refuse never reaches the question: checkValidity
    // fires "invalid" on each refused field, which the form's script shows beside it
    // (static/js/scale.js); a form without one gets the browser's own message.
    if (!form.checkValidity()) {
      const first = form.querySelector(":invalid");
      if (!first || !first.closest("[data-field-errors]")) form.reportValidity();
      if (first && first.focus) first.focus();
      return;
    }
    if (!dialog || typeof dialog.showModal !== "function") {
      if (window.confirm(form.dataset.confirm)) { form.dataset.confirmed = "yes"; form.submit(); }
      return;
    }
    pending = { form: form, opener: event.submitter || document.activeElement };
    message.textContent = form.dataset.confirm;
    dialog.returnValue = "";
    dialog.showModal();
  }, true);

  if (!dialog) return;
  dialog.addEventListener("close", function () {
    const current = pending;
    pending = null;
    if (!current) return;
    if (dialog.returnValue === "confirm") {
      let form = current.form;
      if (!document.contains(form)) {
        // A live refresh replaced the controls meanwhile: submit the same action's new form.
        form = document.querySelector('form[data-confirm][action="' + form.getAttribute("action") + '"]');
        if (!form) return; // the control is gone (the state changed): nothing to do
      }
      form.dataset.confirmed = "yes";
      form.requestSubmit ? form.requestSubmit() : form.submit();
    } else if (current.opener && current.opener.focus && document.contains(current.opener)) {
      current.opener.focus(); // back to the control that opened the dialog
    }
  });
})();
