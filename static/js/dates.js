// One date style on every page (base.html loads this), in the browser's time zone:
// "2026-11-23 19:12:11", with the zone on hover. On load, and whenever a script calls
// crawlhubDates.localize(element) on new content:
// - every <time datetime="..."> shows that style (crawlhub/templatetags/dates.py, |moment);
//   a <time data-age> (|ago) keeps its age ("5 min ago") and shows the exact time on hover;
// - an element with data-when="..." gets the exact time on hover after its data-when-label;
//   an <option data-when data-label> reads "label (time)", as options hold no elements.
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
  // The words of crawlhub/templatetags/dates.py's age().
  function age(seconds) {
    seconds = Math.max(0, seconds);
    if (seconds < 90) return Math.round(seconds) + " s ago";
    if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
    if (seconds < 172800) return Math.round(seconds / 3600) + " h ago";
    return Math.round(seconds / 86400) + " d ago";
  }
  function hover(text) { return text + " (" + zone() + ")"; }
  // A <time> for a moment: the one style, or its age with the exact time on hover.
  function timeEl(value, asAge) {
    const el = document.createElement("time");
    const d = value instanceof Date ? value : new Date(value);
    el.setAttribute("datetime", isNaN(d.getTime()) ? String(value) : d.toISOString());
    if (asAge) el.dataset.age = "";
    localize1(el);
    return el;
  }
  function localize1(el) {
    const value = el.getAttribute("datetime");
    const text = format(value);
    if (!text) return;
    if (el.hasAttribute("data-age")) el.textContent = age((Date.now() - new Date(value).getTime()) / 1000);
    else el.textContent = text;
    el.title = hover(text);
  }
  function localize(root) {
    root = root || document;
    root.querySelectorAll("time[datetime]").forEach(localize1);
    root.querySelectorAll("[data-when]").forEach(function (el) {
      const text = format(el.dataset.when);
      if (!text) return;
      if (el.tagName === "OPTION") el.textContent = (el.dataset.label || "") + " (" + text + ")";
      else el.title = (el.dataset.whenLabel || "") + hover(text);
    });
  }
  window.crawlhubDates = {
    format: format, clock: clock, day: day, zone: zone, age: age, timeEl: timeEl, localize: localize,
  };
  localize(document);
})();
