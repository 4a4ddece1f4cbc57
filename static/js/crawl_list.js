// The crawl list: rows follow the compact snapshots that /ws/crawls/ relays.
(function () {
  "use strict";
  // A filter applies as soon as it is chosen (without script, the noscript button does it).
  document.querySelectorAll("form.filters select").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });
  const liveEl = document.getElementById("live");
  const table = document.getElementById("crawls");
  if (!liveEl || !window.crawlhubLive) return;
  const news = document.getElementById("list-news");
  const lastAt = {};

  function number(n) { return Number(n || 0).toLocaleString("en-US"); }

  function apply(snap) {
    const row = table && table.querySelector('tr[data-crawl="' + snap.id + '"]');
    // The snapshots sent on connect cover crawls on other pages and filtered out too.
    if (!row) { if (news && !snap.on_connect) news.hidden = false; return; }
    const stats = snap.stats || {};
    row.querySelectorAll("[data-counter]").forEach(function (cell) {
      cell.textContent = number(stats[cell.dataset.counter]);
    });
    const state = row.querySelector('[data-field="state"]');
    state.textContent = snap.state_label;
    state.className = "state state-" + snap.state;
    const active = snap.state === "running" || snap.state === "pausing";
    row.querySelector('[data-field="rate"]').textContent = active ? snap.rate.toFixed(1) : "—";
    const progress = row.querySelector("progress");
    progress.value = stats.requests || 0;
    row.querySelector('[data-field="percent"]').textContent =
      Math.min(100, Math.round(100 * (stats.requests || 0) / (snap.max_pages || 1))) + "%";
    if (snap.finished_at) {
      row.querySelector('[data-field="finished"]').textContent =
        new Date(snap.finished_at).toISOString().slice(0, 16).replace("T", " ");
    }
    row.querySelectorAll("form[data-action]").forEach(function (form) {
      form.hidden = snap.actions.indexOf(form.dataset.action) === -1;
    });
  }

  window.crawlhubSnapshot = apply;
  window.crawlhubLive("/ws/crawls/", function (snap) {
    if (snap.type !== "crawl.stats") return;
    if (lastAt[snap.id] && snap.at && snap.at < lastAt[snap.id]) return;
    lastAt[snap.id] = snap.at || 0;
    apply(snap);
  }, function (status) {
    liveEl.textContent = status === "live" ? "live" : status;
    liveEl.className = "health " + (status === "live" ? "ok" : "stale");
  });
})();
