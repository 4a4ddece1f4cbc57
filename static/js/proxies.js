// The Proxies page's health panel, live from /ws/proxies/ (staff only), and the table's
// select-all box (shown only with this script, which is what makes it work).
(function () {
  "use strict";
  const all = document.getElementById("select-all");
  if (all) {
    const boxes = function () { return document.querySelectorAll('input[name="ids"]'); };
    all.hidden = false;
    all.addEventListener("change", function () {
      boxes().forEach(function (box) { box.checked = all.checked; });
    });
    document.addEventListener("change", function (event) {
      if (event.target.name !== "ids") return;
      const checked = Array.from(boxes()).filter(function (box) { return box.checked; }).length;
      all.checked = checked === boxes().length;
      all.indeterminate = checked > 0 && checked < boxes().length;
    });
  }
  const panel = document.getElementById("pool-health");
  if (!panel || !window.crawlhubLive) return;
  const liveEl = document.getElementById("live");

  function pick(obj, path) {
    return path.split(".").reduce(function (o, k) { return o == null ? undefined : o[k]; }, obj);
  }
  // An age as every page shows one (crawlhub/templatetags/dates.py's |ago): "5 min ago", the
  // exact time in the one date style on hover.
  function showAge(el, seconds) {
    if (seconds == null) { el.textContent = "never"; return; }
    el.replaceChildren(window.crawlhubDates.timeEl(new Date(Date.now() - seconds * 1000), true));
  }
  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function apply(h) {
    if (h.type !== "proxies.health") return;
    const channels = h.channels || {};
    h.checked_out = Object.values(channels).reduce(function (n, c) { return n + c.leased; }, 0);
    panel.querySelectorAll("[data-h]").forEach(function (el) {
      let value = pick(h, el.dataset.h);
      if (value == null && el.dataset.h.startsWith("counters.")) value = 0; // never bumped yet
      if (el.dataset.format === "age") showAge(el, value);
      else if (value == null) el.textContent = "—";
      else el.textContent = Math.round(value).toLocaleString("en-US") + (el.dataset.unit || "");
    });
    document.getElementById("validating").hidden = !h.validating;

    const bins = h.score_histogram || [];
    const top = Math.max(1, ...bins.map(function (b) { return b[1]; }));
    const histogram = document.getElementById("histogram");
    histogram.replaceChildren();
    bins.forEach(function (bin) {
      const col = document.createElement("div");
      col.title = bin[1] + " proxies with a score of " + bin[0];
      const n = document.createElement("span"); n.className = "n"; n.textContent = bin[1];
      const bar = document.createElement("span"); bar.className = "col";
      bar.style.height = (80 * bin[1] / top) + "%";
      const label = document.createElement("small"); label.textContent = bin[0];
      col.append(n, bar, label);
      histogram.append(col);
    });

    const body = document.getElementById("channels");
    body.replaceChildren();
    Object.keys(channels).sort().forEach(function (name) {
      const c = channels[name], tr = document.createElement("tr");
      const link = document.createElement("a");
      link.href = "?channel=" + encodeURIComponent(name);
      link.textContent = name;
      const first = document.createElement("td");
      first.append(link);
      tr.append(first, cell(c.free, "num"), cell(c.leased, "num"), cell(c.banned, "num"),
        cell(c.relaxed, "num"));
      body.append(tr);
    });
    if (!body.children.length) {
      body.innerHTML = '<tr><td colspan="5" class="empty">No channel has used the pool yet.</td></tr>';
    }
  }

  window.crawlhubLive(panel.dataset.ws, apply, function (status) {
    liveEl.textContent = status === "live" ? "live" : status === "closed" ? "closed" : "stale: reconnecting";
    liveEl.className = "health " + (status === "live" ? "ok" : "stale");
  });
})();
