// Keeps the counters of a crawl page current by polling its JSON snapshot.
(function () {
  "use strict";
  const counters = document.getElementById("counters");
  if (!counters) return;
  const live = document.getElementById("live");
  const state = document.getElementById("state");
  const progress = document.getElementById("progress");
  const ENDED = ["finished", "cancelled", "failed", "draft"];

  function show(snapshot) {
    const stats = snapshot.stats || {};
    counters.querySelectorAll("[data-counter]").forEach(function (dd) {
      const value = stats[dd.dataset.counter];
      dd.textContent = value === undefined ? "0" : value;
    });
    if (progress) progress.value = stats.requests || 0;
    if (state.textContent.toLowerCase() !== snapshot.state) {
      state.textContent = snapshot.state;
      state.className = "state state-" + snapshot.state;
    }
    return ENDED.indexOf(snapshot.state) === -1;
  }

  function poll() {
    fetch(counters.dataset.url, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (snapshot) {
        live.textContent = "live"; live.className = "health ok";
        if (show(snapshot)) setTimeout(poll, 1000);
        else { live.textContent = "ended"; live.className = "health"; }
      })
      .catch(function () { live.textContent = "stale"; live.className = "health stale"; setTimeout(poll, 3000); });
  }
  poll();
})();
