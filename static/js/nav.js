// The main navigation folds behind its menu button on narrow screens. app.css hides the
// links there while the top bar says data-menu="closed"; without this script the button
// stays hidden and the links simply wrap.
(function () {
  "use strict";
  const button = document.querySelector(".topbar .nav-toggle");
  if (!button) return;
  const bar = button.closest(".topbar");

  function setOpen(open) {
    button.setAttribute("aria-expanded", String(open));
    bar.dataset.menu = open ? "open" : "closed";
  }

  setOpen(false);
  button.hidden = false;
  button.addEventListener("click", () => setOpen(button.getAttribute("aria-expanded") !== "true"));
  // Escape closes an open menu and hands focus back to its button, as menus do.
  bar.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && bar.dataset.menu === "open") {
      setOpen(false);
      button.focus();
    }
  });
})();
