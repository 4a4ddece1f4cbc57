// A proxy import's or bulk action's progress page: polls the job's status until it ends, then
// reloads, so the server renders the report.
(function () {
  "use strict";
  const card = document.getElementById("job");
  if (!card) return;
  const number = function (n) { return Number(n || 0).toLocaleString("en-US"); };

  function show(job) {
    const state = document.getElementById("job-state");
    state.textContent = job.state;
    state.className = "state state-" + job.state;
    document.getElementById("job-progress").textContent = job.total == null
      ? (job.kind === "import" ? "reading the list…" : "starting…")
      : number(job.done) + " of " + number(job.total) +
        (job.kind === "import" ? " proxies of the list stored" : " proxies");
    const bar = document.getElementById("job-bar");
    bar.value = job.percent;
    bar.textContent = job.percent + " %";
    Object.keys(job.counts).forEach(function (name) {
      const cell = card.querySelector('[data-count="' + name + '"]');
      if (cell) cell.textContent = number(job.counts[name]);
    });
  }

  let delay = 500;
  function poll() {
    fetch(card.dataset.status, { headers: { Accept: "application/json" }, credentials: "same-origin", redirect: "manual" })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (job) {
        show(job);
        if (job.state === "done" || job.state === "failed") {
          window.location.reload();
          return;
        }
        delay = 1000;
        setTimeout(poll, delay);
      })
      .catch(function () {
        delay = Math.min(delay * 2, 10000);
        setTimeout(poll, delay);
      });
  }
  setTimeout(poll, delay);
})();
