// A page that follows a running crawl (the host view, the log): every few seconds each box with
// data-refresh (seconds) is read again from the server (the same page) and swapped in, unless
// the operator is typing in it (a hold's minutes). A redirect (signed out) is not followed:
// see workers.js.
(function () {
  "use strict";
  document.querySelectorAll("[data-refresh][id]").forEach(function (box) {
    const seconds = Number(box.dataset.refresh || 5);
    function refresh() {
      if (document.hidden || box.contains(document.activeElement)) return;
      fetch(window.location.href, { credentials: "same-origin", redirect: "manual" })
        .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
        .then(function (html) {
          const fresh = new DOMParser().parseFromString(html, "text/html").getElementById(box.id);
          if (fresh && !box.contains(document.activeElement)) box.replaceChildren(...fresh.childNodes);
          if (window.crawlhubDates) window.crawlhubDates.localize(box);
        })
        .catch(function () { /* the next turn tries again */ });
    }
    window.setInterval(refresh, seconds * 1000);
  });
})();
