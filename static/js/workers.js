// The Workers page refreshes its tables in place every few seconds (RQ keeps no event stream
// to push from): what each worker is doing, queue lengths, failed jobs.
(function () {
  "use strict";
  const box = document.getElementById("workers-live");
  const liveEl = document.getElementById("live");
  if (!box) return;
  const EVERY_MS = 3000;

  function refresh() {
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("workers-live");
        if (fresh) { box.innerHTML = fresh.innerHTML; window.crawlhubDates.localize(box); }
        liveEl.textContent = "live"; liveEl.className = "health ok";
      })
      .catch(function () { liveEl.textContent = "stale"; liveEl.className = "health stale"; })
      .finally(function () { setTimeout(refresh, EVERY_MS); });
  }
  refresh();
})();
