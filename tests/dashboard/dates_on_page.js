// Every date on the page, in the browser (tests/dashboard/test_browser_dates.py): what each
// <time> and each dated title or option shows against what it should show in the browser's
// zone, and any other text that looks like a date or a time of day (ISO or not, with slashes,
// month names, am/pm, a bare clock). Returns {bad: [what is wrong], seen: [dates shown]}.
() => {
  const pad = (n) => String(n).padStart(2, "0");
  const style = (v) => { const d = new Date(v); return d.getFullYear() + "-" + pad(d.getMonth() + 1)
    + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()); };
  const zone = "(" + Intl.DateTimeFormat().resolvedOptions().timeZone + ", UTC+05:45)";
  const LOOKS = /\d{4}-\d{1,2}-\d{1,2}|\d{1,2}\/\d{1,2}\/\d{2,4}|(?<![\d.:])\d{1,2}:\d{2}(?::\d{2})?(?![\d:])|\b\d{1,2}\s*(am|pm|a\.m\.|p\.m\.)\b|\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}\b|\b(noon|midnight)\b/i;
  const bad = [], seen = [];
  document.querySelectorAll("main time, header time").forEach((el) => {
    const want = style(el.getAttribute("datetime"));
    const text = el.textContent.trim();
    seen.push(text);
    if (el.hasAttribute("data-age")) {
      if (!/^\d+ (s|min|h|d) ago$/.test(text)) bad.push("age reads " + JSON.stringify(text));
    } else if (text !== want) bad.push("time reads " + JSON.stringify(text) + ", not " + want);
    if (el.title !== want + " " + zone) bad.push("time's hover is " + JSON.stringify(el.title) + ", not " + want + " " + zone);
  });
  document.querySelectorAll("[data-when]").forEach((el) => {
    const want = style(el.dataset.when);
    seen.push(want);
    if (el.tagName === "OPTION") {
      if (!el.textContent.endsWith("(" + want + ")")) bad.push("option reads " + JSON.stringify(el.textContent));
    } else if (!el.title.endsWith(want + " " + zone)) bad.push("hover is " + JSON.stringify(el.title));
  });
  // Text outside <time> and dated options, and every other title: nothing that looks dated.
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (parent.closest("time, script, style, option[data-when], pre, code, textarea")) continue;
    const m = node.textContent.match(LOOKS);
    if (m) bad.push("text " + JSON.stringify(m[0]) + " in " + JSON.stringify(node.textContent.trim().slice(0, 80)));
  }
  document.querySelectorAll("main [title]").forEach((el) => {
    if (el.matches("time, [data-when]")) return;
    const m = el.title.match(LOOKS);
    if (m) bad.push("hover " + JSON.stringify(el.title.slice(0, 80)));
  });
  return { bad, seen };
}
