// "Copy" on a YAML page: puts the text of the element named by data-copy-target on the
// clipboard and says so in #yaml-copy-status (where the Clipboard API is refused, e.g. on
// plain HTTP, the text is selected instead so Ctrl+C copies it).
(function () {
  "use strict";
  const button = document.getElementById("yaml-copy");
  const status = document.getElementById("yaml-copy-status");
  if (!button) return;
  const target = document.getElementById(button.dataset.copyTarget);

  function selectText() {
    const range = document.createRange();
    range.selectNodeContents(target);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    status.textContent = "Selected: press Ctrl+C to copy.";
  }

  button.addEventListener("click", function () {
    if (!navigator.clipboard || !window.isSecureContext) { selectText(); return; }
    navigator.clipboard.writeText(target.textContent).then(
      function () { status.textContent = "Copied to the clipboard."; },
      selectText,
    );
  });
})();
