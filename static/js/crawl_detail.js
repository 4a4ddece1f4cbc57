// The live crawl page: snapshots from /ws/crawls/<id>/ (or, while the socket is down, from
// snapshot.json every few seconds) update counters, chart, status classes, per-host queues and
// buttons; the recent pages, errors, failures and the log (its newest lines) are re-fetched when
// they changed.
(function () {
  "use strict";
  const root = document.getElementById("crawl");
  if (!root) return;
  const liveEl = document.getElementById("live");
  const SERIES_SECONDS = 600, POLL_MS = 3000, ACTIVITY_MS = 2000, RECENT_ROWS = 15;
  const CAN_CHANGE_LIVE = ["running", "pausing", "paused"];
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
  const dates = window.crawlhubDates;
  function timeEl(iso) {
    const el = document.createElement("time");
    el.setAttribute("datetime", iso);
    el.textContent = dates.format(iso);
    el.title = el.textContent + " (" + dates.zone() + ")";
    return el;
  }

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
    chartSpan(data[0]);
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
        series: [{ value: function (u, v) { return v == null ? "" : dates.format(new Date(v * 1000)); } },
          { label: "pages/s", stroke: "#2357d9", width: 2, fill: "rgba(35,87,217,.12)",
            spanGaps: false, points: { show: false } }],
        // Times of day in the browser's zone, the same style as every date on the page.
        axes: [{ stroke: "#5f6b7a", label: "time (" + dates.zone() + ")", labelSize: 20, size: 40,
                 space: 70, values: function (u, splits) {
                   return splits.map(function (v) { return dates.clock(new Date(v * 1000)); });
                 } },
               { stroke: "#5f6b7a", label: "pages/s", labelSize: 20, size: 50,
                 values: function (u, splits) { return splits.map(function (v) { return +v.toFixed(2); }); } }],
      }, data, box);
      window.crawlhubChart = chart;  // what the browser tests read the axes from
      window.addEventListener("resize", function () {
        chart.setSize({ width: Math.max(200, box.clientWidth), height: 220 });
      });
    } else {
      chart.setData(data);
    }
  }
  // The chart's title says what its axis spans: at least a minute, at most ten.
  function chartSpan(xs) {
    const el = document.getElementById("chart-span");
    if (!el) return;
    if (!xs.length) { el.textContent = ""; return; }
    const seconds = Math.max(60, xs[xs.length - 1] - xs[0]);
    const minutes = Math.round(seconds / 60);
    el.textContent = minutes <= 1 ? "the last minute" : "the last " + minutes + " minutes";
  }
  function addSeries(series) {
    (series || []).forEach(function (p) { points.set(p[0], p[1]); });
    const ts = Array.from(points.keys());
    const newest = Math.max.apply(null, ts.length ? ts : [0]);
    ts.forEach(function (t) { if (t < newest - SERIES_SECONDS) points.delete(t); });
  }

  // -- recent pages, errors, failures, the log -------------------------------------------------
  function refreshActivity() {
    if (activityTimer) { activityDue = true; return; }
    activityDue = false;
    fetch(root.dataset.activityUrl, { credentials: "same-origin", redirect: "manual" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        const box = document.getElementById("activity");
        box.innerHTML = html;
        dates.localize(box);
        activityBehind();
      })
      .catch(function () {});
    activityTimer = setTimeout(function () {
      activityTimer = null;
      if (activityDue) refreshActivity();
    }, ACTIVITY_MS);
  }

  // The recent pages list shows fewer rows than the counters say were written (the pages of
  // a batch reach the database just after its counters): ask again, a few times.
  let catchUps = 0;
  function activityBehind() {
    if (!last) return;
    const stats = last.stats || {};
    const table = document.getElementById("recent-pages");
    const shown = table ? Number(table.dataset.rows || 0) : 0;
    const written = Number(stats.responses || 0) + Number(stats.no_response || 0);
    if (shown < Math.min(RECENT_ROWS, written) && catchUps < 10) {
      catchUps++;
      setTimeout(refreshActivity, ACTIVITY_MS);
    } else if (shown >= Math.min(RECENT_ROWS, written)) {
      catchUps = 0;
    }
  }

  // A message about the state the page was in (a flash after a redirect, an action's answer)
  // goes once the state changes: "Crawl started." must not stay beside "Paused".
  function dropStaleMessages(state) {
    document.querySelectorAll("main > .messages").forEach(function (list) {
      if ((list.dataset.state || root.dataset.state) !== state) list.remove();
    });
    const notice = document.getElementById("notice");
    if (notice && !notice.hidden && notice.dataset.state && notice.dataset.state !== state) {
      notice.hidden = true;
    }
  }

  // -- one snapshot ----------------------------------------------------------------------------
  function apply(snap) {
    if (snap.type !== "crawl.stats" || snap.id !== Number(root.dataset.id)) return;
    if (last && snap.at && last.at && snap.at < last.at) { // an older one arrived late
      dropStaleMessages(last.state);
      return;
    }
    const stats = snap.stats || {};
    document.querySelectorAll("[data-counter]").forEach(function (el) {
      const value = stats[el.dataset.counter];
      el.textContent = el.dataset.format === "bytes" ? bytes(value) : number(value);
      if (el.dataset.format === "bytes") el.title = number(value) + " bytes";
    });
    const state = document.getElementById("state");
    state.textContent = snap.state_label;
    state.className = "state state-" + snap.state;
    document.getElementById("waiting").hidden = !snap.waiting;
    dropStaleMessages(snap.state);
    const change = document.getElementById("change-link");
    if (change) change.hidden = CAN_CHANGE_LIVE.indexOf(snap.state) === -1;
    const edit = document.getElementById("edit-link");
    if (edit) edit.hidden = snap.state !== "draft";
    document.querySelectorAll("#actions form[data-action]").forEach(function (form) {
      form.hidden = snap.actions.indexOf(form.dataset.action) === -1;
    });
    document.getElementById("add-seeds").hidden = CAN_ADD_SEEDS.indexOf(snap.state) === -1;
    const done = snap.progress || {};
    const progress = document.getElementById("progress");
    progress.max = 100;
    progress.value = done.percent || 0;
    const endLine = document.getElementById("end-line");
    const end = snap.end || {};
    endLine.textContent = end.line || "";
    endLine.className = "end-line end-" + (end.reason || "none");
    endLine.hidden = !end.line;
    document.getElementById("done").textContent = number(done.done);
    document.getElementById("known").textContent = number(done.known);
    document.getElementById("percent").textContent = done.percent || 0;
    document.getElementById("capped").hidden = !done.capped;
    document.getElementById("uncapped").hidden = !!done.capped || !done.open;
    document.getElementById("rate").textContent = Number(snap.rate || 0).toFixed(1);
    document.getElementById("rate-unit").textContent =
      snap.rate_average ? "pages/s on average" : "pages/s";
    const times = document.getElementById("times");
    times.replaceChildren(snap.started_at ? "started " : "not started");
    if (snap.started_at) times.append(timeEl(snap.started_at));
    if (snap.finished_at) times.append(", finished ", timeEl(snap.finished_at));
    document.getElementById("failed-http").hidden = !Number(stats.failed_http || 0);
    const redisError = document.getElementById("redis-error");
    redisError.hidden = !stats.redis_error;
    redisError.querySelector("span").textContent = stats.redis_error || "";

    // Status classes: bars relative to the largest.
    const classes = { status_2xx: stats.status_2xx, status_3xx: stats.status_3xx,
      status_4xx: stats.status_4xx, status_5xx: stats.status_5xx, no_response: stats.no_response };
    const top = Math.max(1, ...Object.values(classes).map(Number).map(function (v) { return v || 0; }));
    Object.keys(classes).forEach(function (name) {
      document.querySelector('[data-bar="' + name + '"]').style.width =
        (100 * (classes[name] || 0) / top) + "%";
    });

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

    const changed = !last || last.state !== snap.state || ["responses", "errors", "failed"].some(
      function (k) { return (last.stats || {})[k] !== stats[k]; });
    const first = !last;
    last = snap;
    if (first) activityBehind(); else if (changed) refreshActivity();
  }
  window.crawlhubSnapshot = apply;

  // -- staying live ----------------------------------------------------------------------------
  // The badge: "live" over the websocket; "live (polling)" while the socket is down and
  // snapshot.json answers; "stale" only when neither brings news.
  let socketLive = false;
  function badge(text, ok, status) {
    liveEl.textContent = text;
    liveEl.className = "health " + (ok ? "ok" : "stale");
    liveEl.dataset.status = status;
  }
  function poll() {
    fetch(root.dataset.snapshotUrl, { credentials: "same-origin", redirect: "manual" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (snap) {
        apply(snap);
        if (!socketLive) badge("live (polling)", true, "polling");
      })
      .catch(function () { if (!socketLive) badge("stale: reconnecting", false, "stale"); });
  }
  function status(state) {
    socketLive = state === "live";
    if (socketLive) badge("live", true, "live");
    else if (liveEl.dataset.status !== "polling") {
      badge(state === "closed" ? "closed" : "stale: reconnecting", false, "stale");
    }
    if (socketLive && pollTimer) { clearInterval(pollTimer); pollTimer = null; }
    if (!socketLive && !pollTimer) { pollTimer = setInterval(poll, POLL_MS); poll(); }
  }

  apply(JSON.parse(document.getElementById("snapshot").textContent));
  window.crawlhubLive(root.dataset.ws, apply, status);
})();
