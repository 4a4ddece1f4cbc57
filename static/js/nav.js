// On a narrow screen the top bar folds its links under a Menu button (app.css hides them
// while .topbar.folding is set and .open is not); without this script they stay on show.
(function () {
  "use strict";
  const bar = document.getElementById("topbar");
  const toggle = document.getElementById("nav-toggle");
  if (!bar || !toggle) return;
  bar.classList.add("folding");
  toggle.hidden = false;
  toggle.addEventListener("click", function () {
    const open = bar.classList.toggle("open");
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
  });
})();
