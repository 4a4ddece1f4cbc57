// Crawl action buttons without a page reload: post the form, ask for JSON, show the answer.
// The live snapshot that comes back (and the websocket's) updates the page. Forms that say
// data-confirm ask first. Without this script the forms still work (post + redirect).
(function () {
  "use strict";

  function notice(text, ok) {
    let box = document.getElementById("notice");
    if (!box) {
      box = document.createElement("p");
      box.id = "notice";
      box.setAttribute("role", "status");
      document.querySelector("main").prepend(box);
    }
    box.textContent = text;
    box.className = "notice " + (ok ? "ok" : "error");
    box.hidden = false;
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!form.matches("form[data-action], form[data-live]")) return;
    event.preventDefault();
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) return;
    const button = form.querySelector("button");
    if (button) button.disabled = true;
    fetch(form.action, {
      method: "POST", body: new FormData(form), credentials: "same-origin",
      headers: { "Accept": "application/json" },
    })
      .then(function (r) {
        return r.json().catch(function () { throw new Error("HTTP " + r.status); });
      })
      .then(function (answer) {
        notice(answer.message, answer.ok);
        // The crawl page drops the notice once the crawl leaves the state it brought.
        const box = document.getElementById("notice");
        if (box) box.dataset.state = answer.snapshot ? answer.snapshot.state : "";
        if (answer.snapshot && window.crawlhubSnapshot) window.crawlhubSnapshot(answer.snapshot);
      })
      .catch(function (error) { notice("The action did not reach the server: " + error.message, false); })
      .finally(function () { if (button) button.disabled = false; });
  });
})();
