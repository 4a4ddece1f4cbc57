// The live crawl page: snapshots from /ws/crawls/<id>/ (or, while the socket is down, from
// snapshot.json every few seconds) update counters, chart, status classes, per-host queues and
// buttons; the recent pages, errors, failures and audit trail are re-fetched when they changed.
(function () {
  "use strict";
  const root = document.getElementById("crawl");
  if (!root) return;
  const liveEl = document.getElementById("live");
  const SERIES_SECONDS = 600, POLL_MS = 3000, ACTIVITY_MS = 2000;
  const CAN_ADD_SEEDS = ["draft", "running", "paused"];
  const points = new Map(); // unix s -> responses
  let last = null, chart = null, pollTimer = null, activityTimer = null, activityDue = false;

  function number(n) { return Number(n || 0).toLocaleString("en-US"); }
  function bytes(n) {
    n = Number(n || 0);
    const units = ["bytes", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  function when(iso) { return iso ? new Date(iso).toLocaleString() : ""; }

  // -- the chart ------------------------------------------------------------------------------
  function chartData() {
    const ts = Array.from(points.keys()).sort(function (a, b) { return a - b; });
    const xs = [], ys = [];
    for (let i = 1; i < ts.length; i++) {
      const dt = ts[i] - ts[i - 1];
      if (dt > 5) { xs.push(ts[i - 1] + 1); ys.push(null); } // a pause: break the line
      xs.push(ts[i]);
      ys.push(Math.max(0, (points.get(ts[i]) - points.get(ts[i - 1])) / dt));
    }
    return [xs, ys];
  }
  function drawChart() {
    const box = document.getElementById("chart");
    const data = chartData();
    document.getElementById("chart-empty").hidden = data[0].length > 0;
    if (!window.uPlot || !box) return;
    if (!chart) {
      if (!data[0].length) return;
      chart = new window.uPlot({
        width: Math.max(200, box.clientWidth), height: 220, legend: { show: false },
        // At least a minute wide, so two points a second apart do not fill the chart. Taken
        // from the data itself: with a single point uPlot's own min/max span years.
        scales: { x: { time: true, range: function (u, min, max) {
          const xs = (u.data && u.data[0]) || [];
          if (xs.length) { min = xs[0]; max = xs[xs.length - 1]; }
          return [Math.min(min, max - 60), max];
        } },
          y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } },
        series: [{}, { label: "pages/s", stroke: "#2357d9", width: 2, fill: "rgba(35,87,217,.12)",
          spanGaps: false, points: { show: false } }],
        axes: [{ stroke: "#5f6b7a" }, { stroke: "#5f6b7a", size: 48 }],
      }, data, box);
      window.addEventListener("resize", function () {
        chart.setSize({ width: Math.max(200, box.clientWidth), height: 220 });
      });
    } else {
      chart.setData(data);
    }
  }
  function addSeries(series) {
    (series || []).forEach(function (p) { points.set(p[0], p[1]); });
    const ts = Array.from(points.keys());
    const newest = Math.max.apply(null, ts.length ? ts : [0]);
    ts.forEach(function (t) { if (t < newest - SERIES_SECONDS) points.delete(t); });
  }

  // -- recent pages, errors, failures, audit trail ---------------------------------------------
  function refreshActivity() {
    if (activityTimer) { activityDue = true; return; }
    activityDue = false;
    fetch(root.dataset.activityUrl, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) { document.getElementById("activity").innerHTML = html; })
      .catch(function () {});
    activityTimer = setTimeout(function () {
      activityTimer = null;
      if (activityDue) refreshActivity();
    }, ACTIVITY_MS);
  }

  // -- one snapshot ----------------------------------------------------------------------------
  function apply(snap) {
    if (snap.type !== "crawl.stats" || snap.id !== Number(root.dataset.id)) return;
    if (last && snap.at && last.at && snap.at < last.at) return; // an older one arrived late
    const stats = snap.stats || {};
    document.querySelectorAll("[data-counter]").forEach(function (el) {
      const value = stats[el.dataset.counter];
      el.textContent = el.dataset.format === "bytes" ? bytes(value) : number(value);
      if (el.dataset.format === "bytes") el.title = number(value) + " bytes";
    });
    const state = document.getElementById("state");
    state.textContent = snap.state_label;
    state.className = "state state-" + snap.state;
    document.querySelectorAll("#actions form[data-action]").forEach(function (form) {
      form.hidden = snap.actions.indexOf(form.dataset.action) === -1;
    });
    document.getElementById("add-seeds").hidden = CAN_ADD_SEEDS.indexOf(snap.state) === -1;
    const progress = document.getElementById("progress");
    progress.max = snap.max_pages;
    progress.value = Math.min(stats.requests || 0, snap.max_pages);
    document.getElementById("percent").textContent =
      Math.min(100, Math.round(100 * (stats.requests || 0) / (snap.max_pages || 1)));
    document.getElementById("rate").textContent = Number(snap.rate || 0).toFixed(1);
    document.getElementById("times").textContent =
      (snap.started_at ? "started " + when(snap.started_at) : "not started") +
      (snap.finished_at ? ", finished " + when(snap.finished_at) : "");
    const redisError = document.getElementById("redis-error");
    redisError.hidden = !stats.redis_error;
    redisError.querySelector("span").textContent = stats.redis_error || "";

    // Status classes: bars relative to the largest.
    const classes = { status_2xx: stats.status_2xx, status_3xx: stats.status_3xx,
      status_4xx: stats.status_4xx, status_5xx: stats.status_5xx, noresponse: stats.errors };
    const top = Math.max(1, ...Object.values(classes).map(Number).map(function (v) { return v || 0; }));
    Object.keys(classes).forEach(function (name) {
      document.querySelector('[data-bar="' + name + '"]').style.width =
        (100 * (classes[name] || 0) / top) + "%";
    });
    document.querySelector('[data-field="noresponse"]').textContent = number(stats.errors);

    const hosts = document.getElementById("hosts");
    hosts.replaceChildren();
    (snap.hosts || []).forEach(function (pair) {
      const tr = document.createElement("tr");
      const host = document.createElement("td"); host.className = "url"; host.textContent = pair[0];
      const n = document.createElement("td"); n.className = "num"; n.textContent = number(pair[1]);
      tr.append(host, n);
      hosts.append(tr);
    });
    if (!hosts.children.length) {
      hosts.innerHTML = '<tr><td colspan="2" class="empty">Nothing queued.</td></tr>';
    }
    document.getElementById("hosts-more").hidden = (snap.hosts_total || 0) <= (snap.hosts || []).length;

    addSeries(snap.series);
    drawChart();

    if (last && (last.state !== snap.state || ["responses", "errors", "failed"].some(
      function (k) { return (last.stats || {})[k] !== stats[k]; }))) refreshActivity();
    last = snap;
  }
  window.crawlhubSnapshot = apply;

  // -- staying live ----------------------------------------------------------------------------
  function poll() {
    fetch(root.dataset.snapshotUrl, { credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(apply)
      .catch(function () {});
  }
  function status(state) {
    const live = state === "live";
    liveEl.textContent = live ? "live" : state === "closed" ? "closed" : "stale: reconnecting";
    liveEl.className = "health " + (live ? "ok" : "stale");
    liveEl.dataset.status = live ? "live" : "stale";
    if (live && pollTimer) { clearInterval(pollTimer); pollTimer = null; }
    if (!live && !pollTimer) pollTimer = setInterval(poll, POLL_MS);
  }

  apply(JSON.parse(document.getElementById("snapshot").textContent));
  window.crawlhubLive(root.dataset.ws, apply, status);
})();
