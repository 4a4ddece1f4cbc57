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

  // As the durations template filter says it: the two largest units that matter.
  const UNITS = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];
  function duration(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    const parts = [];
    for (const [unit, size] of UNITS) {
      if (seconds >= size || (unit === "s" && !parts.length)) {
        parts.push(Math.floor(seconds / size) + " " + unit);
        seconds %= size;
      } else if (parts.length) break;
      if (parts.length === 2) break;
    }
    return parts.join(" ");
  }

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
    // Done against known work, as the crawl's page shows it (live.progress on the server).
    const done = snap.progress || { done: 0, known: 0, percent: 0 };
    const progress = row.querySelector("progress");
    progress.max = 100;
    progress.value = done.percent;
    row.querySelector('[data-field="percent"]').textContent = done.percent + "%";
    // Why it ended (or that it is stalled), in one line: live.status_line on the server.
    const end = row.querySelector('[data-field="end"]');
    const line = (snap.end && snap.end.line) || "";
    end.textContent = line;
    end.hidden = !line;
    // The duration runs on while the crawl has not ended, and stops at its end.
    row.querySelectorAll('[data-field="duration"][data-started]').forEach(function (cell) {
      const end = snap.finished_at ? new Date(snap.finished_at) : new Date();
      cell.textContent = duration((end - new Date(cell.dataset.started)) / 1000);
    });
    // A crawl that starts or ends while the list is open shows when, in the one date style.
    const started = row.querySelector(".c-started");
    if (started && snap.started_at && !started.querySelector("time")) {
      started.replaceChildren(window.crawlhubDates.timeEl(snap.started_at));
    }
    row.querySelectorAll('[data-field="duration"]').forEach(function (cell) {
      if (snap.finished_at && !cell.dataset.when) {
        cell.dataset.when = snap.finished_at;
        cell.dataset.whenLabel = "Finished ";
        window.crawlhubDates.localize(row);
      }
    });
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
