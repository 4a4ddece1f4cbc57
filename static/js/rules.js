// The new-crawl page's extraction rules: a table of rules that writes the JSON field the form
// sends (the textarea stays the source of truth, and works without this script), and "Try on
// a URL", which asks the server what each rule yields on one page.
(function () {
  const section = document.getElementById("extraction");
  if (!section) return;
  const textarea = section.querySelector("textarea[name=extract_rules]");
  const editor = document.getElementById("rule-editor");
  const body = editor.querySelector("tbody");
  const KINDS = [["css", "CSS"], ["xpath", "XPath"], ["regex", "Regex"], ["json", "JSON (JMESPath)"]];
  const GETS = [["text", "Text"], ["html", "HTML"], ["attr", "Attribute"]];

  function read() {
    const text = textarea.value.trim();
    if (!text) return [];
    try {
      const rules = JSON.parse(text);
      return Array.isArray(rules) ? rules : null;
    } catch (e) {
      return null;
    }
  }

  function input(value, label, attrs) {
    const el = document.createElement("input");
    el.value = value || "";
    el.setAttribute("aria-label", label);
    Object.entries(attrs || {}).forEach(([k, v]) => el.setAttribute(k, v));
    return el;
  }

  function select(options, value, label) {
    const el = document.createElement("select");
    el.setAttribute("aria-label", label);
    options.forEach(([v, text]) => {
      const o = document.createElement("option");
      o.value = v; o.textContent = text; o.selected = v === value;
      el.appendChild(o);
    });
    return el;
  }

  function row(rule) {
    const tr = document.createElement("tr");
    const cells = {
      name: input(rule.name, "Field name", {placeholder: "price", maxlength: "64"}),
      kind: select(KINDS, rule.kind || "css", "Kind"),
      expr: input(rule.expr, "Selector or expression", {placeholder: ".price"}),
      get: select(GETS, rule.get || "text", "Take"),
      attr: input(rule.attr, "Attribute", {placeholder: "href"}),
      many: Object.assign(document.createElement("input"), {type: "checkbox", checked: !!rule.many}),
      url_pattern: input(rule.url_pattern, "Only URLs matching", {placeholder: "/product/"}),
    };
    cells.many.setAttribute("aria-label", "All matches");
    Object.values(cells).forEach((el) => {
      const td = document.createElement("td");
      td.appendChild(el);
      tr.appendChild(td);
      el.addEventListener("input", write);
      el.addEventListener("change", write);
    });
    const remove = Object.assign(document.createElement("button"), {type: "button", textContent: "Remove"});
    remove.addEventListener("click", () => { tr.remove(); write(); });
    const td = document.createElement("td");
    td.appendChild(remove);
    tr.appendChild(td);
    tr.rule = cells;
    body.appendChild(tr);
  }

  function write() {
    const rules = [];
    body.querySelectorAll("tr").forEach((tr) => {
      const c = tr.rule;
      const rule = {name: c.name.value.trim(), kind: c.kind.value, expr: c.expr.value};
      if (!rule.name && !rule.expr) return;
      const structural = rule.kind === "css" || rule.kind === "xpath";
      if (structural && c.get.value !== "text") rule.get = c.get.value;
      if (structural && c.get.value === "attr") rule.attr = c.attr.value.trim();
      if (c.many.checked) rule.many = true;
      if (c.url_pattern.value.trim()) rule.url_pattern = c.url_pattern.value.trim();
      rules.push(rule);
    });
    textarea.value = rules.length ? JSON.stringify(rules, null, 1) : "";
  }

  const rules = read();
  if (rules !== null) {  // text that is not a JSON list stays for the person to mend
    rules.forEach(row);
    if (!rules.length) row({});
    editor.hidden = false;
  }
  document.getElementById("rule-add").addEventListener("click", () => row({}));

  const result = document.getElementById("preview-result");
  function show(rows, note) {
    result.replaceChildren();
    if (note) {
      const p = document.createElement("p");
      p.className = note.error ? "error" : "meta";
      p.textContent = note.text;
      result.appendChild(p);
    }
    if (!rows.length) return;
    const table = document.createElement("table");
    table.className = "compact";
    rows.forEach(([name, value, error]) => {
      const tr = table.insertRow();
      const th = document.createElement("th");
      th.textContent = name;
      tr.appendChild(th);
      const td = tr.insertCell();
      if (error) { td.className = "error"; td.textContent = error; }
      else td.textContent = value === null ? "(nothing found)" : (typeof value === "string" ? value : JSON.stringify(value));
    });
    result.appendChild(table);
  }

  document.getElementById("preview-run").addEventListener("click", async () => {
    const form = section.closest("form");
    const data = new FormData(form);
    data.set("preview_url", document.getElementById("preview-url").value);
    show([], {text: "Fetching…"});
    let answer;
    try {
      const response = await fetch(section.dataset.previewUrl, {
        method: "POST", body: data, headers: {"Accept": "application/json"}, credentials: "same-origin",
      });
      answer = await response.json();
    } catch (e) {
      show([], {error: true, text: "The preview could not be asked for: " + e});
      return;
    }
    if (answer.errors) {
      const lines = Object.entries(answer.errors).map(([field, msgs]) => msgs.join(" "));
      show([], {error: true, text: lines.join(" ")});
      return;
    }
    const status = answer.status === null ? "no response: " + answer.error : "HTTP " + answer.status + " " + answer.content_type;
    const failed = answer.field_errors;
    const names = Object.keys(answer.fields).concat(Object.keys(failed).filter((n) => !(n in answer.fields)));
    const rows = names.map((n) => [n, answer.fields[n] === undefined ? null : answer.fields[n], failed[n]]);
    answer.skipped.forEach((n) => rows.push([n, "(not applied: the URL does not match its URL pattern)", ""]));
    show(rows,
         {text: answer.final_url + " — " + status + (answer.not_kept ? ". " + answer.not_kept : ""),
          error: !!answer.not_kept});
  });
})();
