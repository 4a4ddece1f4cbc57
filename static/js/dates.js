// One date style on every page that loads this, in the browser's time zone: "2026-11-23
// 19:12:11", with the zone on hover. Every <time datetime="..."> is rewritten on load and
// whenever a script calls crawlhubDates.localize(element) on new content.
(function () {
  "use strict";
  function pad(n) { return String(n).padStart(2, "0"); }
  function zone() {
    const minutes = -new Date().getTimezoneOffset();
    const sign = minutes >= 0 ? "+" : "-";
    const abs = Math.abs(minutes);
    let name = "";
    try { name = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { name = ""; }
    return (name ? name + ", " : "") + "UTC" + sign + pad(Math.floor(abs / 60)) + ":" + pad(abs % 60);
  }
  function day(d) { return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()); }
  function clock(d) { return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()); }
  function format(value) {
    const d = value instanceof Date ? value : new Date(value);
    if (isNaN(d.getTime())) return "";
    return day(d) + " " + clock(d);
  }
  function localize(root) {
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      const text = format(el.getAttribute("datetime"));
      if (!text) return;
      el.textContent = text;
      el.title = text + " (" + zone() + ")";
    });
  }
  window.crawlhubDates = { format: format, clock: clock, day: day, zone: zone, localize: localize };
  localize(document);
})();
