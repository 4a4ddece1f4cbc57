(function () {
  "use strict";
  const light = document.getElementById("health");
  if (!light || !window.crawlhubLive) return;
  window.crawlhubLive(light.dataset.url, function (report) {
    const workers = report.workers.ok ? report.workers.count : 0;
    light.className = "health " + (report.ok && workers > 0 ? "ok" : "bad");
    light.textContent = !report.redis.ok ? "Redis down" : !report.database.ok ? "DB down"
      : workers + (workers === 1 ? " worker" : " workers");
    light.title = JSON.stringify(report);
  }, function (state) {
    if (state !== "live") { light.className = "health stale"; light.textContent = state; }
  });
})();
