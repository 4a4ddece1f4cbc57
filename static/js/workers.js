// The Workers page refreshes its tables in place every few seconds (RQ keeps no event stream
// to push from): what each worker is doing, queue lengths, failed jobs.
(function () {
  "use strict";
  const box = document.getElementById("workers-live");
  const liveEl = document.getElementById("live");
  if (!box) return;
  const EVERY_MS = 3000;

  // A poll that is redirected (the session ended: to the login page) is not followed: the login
  // page would set a new CSRF cookie under a login form open in another tab, which the check
  // would then refuse.
  function refresh() {
    let signedOut = false;
    fetch(location.href, { credentials: "same-origin", redirect: "manual" })
      .then(function (r) {
        signedOut = r.type === "opaqueredirect";
        if (!r.ok) throw new Error(r.status);
        return r.text();
      })
      .then(function (html) {
        const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("workers-live");
        if (fresh) { box.innerHTML = fresh.innerHTML; window.crawlhubDates.localize(box); }
        liveEl.textContent = "live"; liveEl.className = "health ok";
      })
      .catch(function () {
        liveEl.textContent = signedOut ? "signed out: reload to log in" : "stale";
        liveEl.className = "health stale";
      })
      .finally(function () { if (!signedOut) setTimeout(refresh, EVERY_MS); });
  }
  refresh();
})();
