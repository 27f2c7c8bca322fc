// sturdyrpc inspect: the page. Plain JavaScript, no build step, nothing from elsewhere.
// The server's API is described in sturdyrpc/inspect/app.py.
"use strict";

const TOKEN = document.querySelector('meta[name="inspect-token"]').content;
const $ = (id) => document.getElementById(id);
const entries = [];           // every timeline entry, by seq
const rows = [];              // the <li> of each entry, by seq
let next = 0;                 // the seq of the next entry to ask for
let version = -1;             // the changes seen (the long poll waits for the next one)
let summary = null;
let state = null;
let tab = "tools";
let selected = null;          // {kind, item}
let catalogKey = "";
let elicitationKey = "";
const overdue = new Set();    // seqs of requests unanswered past the deadline

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

async function api(path, body) {
  const opts = { headers: { "X-Inspect-Token": TOKEN } };
  if (body !== undefined) {
    opts.method = "POST";
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  return r.json();
}

const json = (v) => JSON.stringify(v, null, 2);

// ---------------------------------------------------------------- state: header, catalog, elicitations

function showState(s) {
  state = s;
  $("target").textContent = s.target;
  const st = $("status");
  st.textContent = s.status + (s.version ? " · MCP " + s.version : "");
  st.className = "badge " + s.status;
  const info = s.server_info || {};
  $("server").textContent = info.name ? `${info.name} ${info.version || ""}` : "";
  const err = $("error");
  err.hidden = !s.error;
  err.textContent = s.error ? "The MCP session failed: " + s.error + "\nThe messages that led to it are on the timeline." : "";
  $("stderr").textContent = s.stderr || "(nothing)";
  for (const k of ["tools", "resources", "templates", "prompts"]) $("count-" + k).textContent = s.catalog[k].length;
  // The list is drawn again only when the shown tab's items changed: a click is never lost to a redraw.
  const key = tab + JSON.stringify(s.catalog[tab]) + (s.catalog_errors[tab] || "");
  if (key !== catalogKey) showItems();
  showCalls(s.calls || []);
  const ekey = s.elicitations.map((e) => e.n).join(",");
  if (ekey !== elicitationKey) {
    elicitationKey = ekey;
    showElicitations(s.elicitations);
  }
}

function itemName(kind, item) {
  return kind === "resources" ? item.uri : kind === "templates" ? item.uriTemplate : item.name;
}

function showItems() {
  catalogKey = state ? tab + JSON.stringify(state.catalog[tab]) + (state.catalog_errors[tab] || "") : "";
  const list = $("items");
  list.replaceChildren();
  const items = (state && state.catalog[tab]) || [];
  const err = state && state.catalog_errors[tab];
  if (!items.length) list.append(el("li", { class: "empty", text: err ? "listing failed: " + err : "none" }));
  for (const item of items) {
    const li = el("li", { "data-name": itemName(tab, item), onclick: () => select(tab, item, li) },
      el("span", { class: "name", text: item.title || itemName(tab, item) }),
      item.description ? el("span", { class: "desc", text: item.description }) : null);
    list.append(li);
  }
}

function select(kind, item, li) {
  for (const other of $("items").children) other.classList.remove("selected");
  li.classList.add("selected");
  selected = { kind, item };
  $("form-panel").hidden = false;
  $("form-title").textContent = itemName(kind, item);
  $("form-description").textContent = item.description || "";
  $("result").replaceChildren();
  const form = $("call-form");
  form.replaceChildren();
  let schema = { type: "object", properties: {} };
  if (kind === "tools") schema = item.inputSchema || schema;
  if (kind === "prompts") schema = promptSchema(item);
  if (kind === "templates") schema = templateSchema(item.uriTemplate);
  const fields = schemaFields(schema, form);
  const verb = { tools: "Call", resources: "Read", templates: "Read", prompts: "Get" }[kind];
  form.append(el("button", { type: "submit", class: "primary", id: "submit-call", text: verb }));
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    let args;
    try {
      args = fields();
    } catch (e) {
      $("result").replaceChildren(el("div", { class: "rpc-error content", text: String(e.message || e) }));
      return;
    }
    $("result").replaceChildren(el("p", { class: "dim", text: "waiting for the reply..." }));
    let body;
    if (kind === "tools") body = { kind: "tool", name: item.name, arguments: args };
    else if (kind === "prompts") body = { kind: "prompt", name: item.name, arguments: args };
    else if (kind === "resources") body = { kind: "resource", name: item.uri, arguments: {} };
    else body = { kind: "resource", name: expandTemplate(item.uriTemplate, args), arguments: {} };
    showResult(await api("/api/call", body));
  };
}

function promptSchema(prompt) {
  const properties = {};
  const required = [];
  for (const a of prompt.arguments || []) {
    properties[a.name] = { type: "string", description: a.description };
    if (a.required) required.push(a.name);
  }
  return { type: "object", properties, required };
}

function templateSchema(template) {
  const properties = {};
  for (const m of template.matchAll(/\{[+#./;?&]?([^}]+)\}/g)) {
    for (const name of m[1].split(",")) properties[name.replace(/[*]|:\d+$/g, "")] = { type: "string" };
  }
  return { type: "object", properties, required: Object.keys(properties) };
}

function expandTemplate(template, args) {
  return template.replace(/\{([+#./;?&]?)([^}]+)\}/g, (_, op, names) =>
    names.split(",").map((n) => {
      const v = String(args[n.replace(/[*]|:\d+$/g, "")] ?? "");
      return op === "+" || op === "#" ? encodeURI(v) : encodeURIComponent(v);
    }).join(","));
}

// ---------------------------------------------------------------- forms from JSON Schema

function enumOptions(s) {
  if (Array.isArray(s.enum)) return s.enum.map((v, i) => ({ value: v, title: (s.enumNames || [])[i] || String(v) }));
  const alts = s.oneOf || s.anyOf;
  if (Array.isArray(alts) && alts.length && alts.every((a) => a && "const" in a)) {
    return alts.map((a) => ({ value: a.const, title: a.title || String(a.const) }));
  }
  return null;
}

// Adds one field per property of `schema` to `container`; returns the function that reads them
// (it throws with a message a person can act on when a value cannot be read).
function schemaFields(schema, container, prefix) {
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const readers = [];
  for (const [name, prop] of Object.entries(props)) {
    const s = prop || {};
    const id = (prefix || "field") + "-" + name;
    const label = el("label", { for: id }, s.title || name, required.has(name) ? el("span", { class: "req", text: " *" }) : null,
      s.description ? el("span", { class: "help", text: s.description }) : null);
    const field = el("div", { class: "field", "data-field": name }, label);
    const opts = enumOptions(s);
    const itemOpts = s.type === "array" && s.items ? enumOptions(s.items) : null;
    let read;
    if (opts) {
      const sel = el("select", { id, name });
      if (!required.has(name)) sel.append(el("option", { value: "", text: "" }));
      opts.forEach((o, i) => sel.append(el("option", { value: String(i), text: o.title, selected: s.default === o.value })));
      read = () => (sel.value === "" ? undefined : opts[Number(sel.value)].value);
      field.append(sel);
    } else if (itemOpts) {
      const sel = el("select", { id, name, multiple: true });
      itemOpts.forEach((o, i) => sel.append(el("option", { value: String(i), text: o.title, selected: (s.default || []).includes(o.value) })));
      read = () => [...sel.selectedOptions].map((o) => itemOpts[Number(o.value)].value);
      field.append(sel);
    } else if (s.type === "boolean") {
      const box = el("input", { id, name, type: "checkbox", checked: s.default === true });
      read = () => box.checked;
      label.prepend(box);
    } else if (s.type === "number" || s.type === "integer") {
      const input = el("input", { id, name, type: "number", step: s.type === "integer" ? "1" : "any", value: s.default });
      read = () => {
        if (input.value === "") return undefined;
        const n = Number(input.value);
        if (s.type === "integer" && !Number.isInteger(n)) throw new Error(`${name}: a whole number is needed`);
        return n;
      };
      field.append(input);
    } else if (s.type === "string" || (s.type === undefined && !s.properties && !s.items)) {
      const input = el("input", { id, name, type: "text", value: s.default, placeholder: s.format || "" });
      read = () => (input.value === "" && !required.has(name) ? undefined : input.value);
      field.append(input);
    } else {
      const area = el("textarea", { id, name, placeholder: "JSON" });
      if (s.default !== undefined) area.value = JSON.stringify(s.default);
      read = () => {
        if (area.value.trim() === "") return undefined;
        try { return JSON.parse(area.value); } catch (e) { throw new Error(`${name}: not JSON (${e.message})`); }
      };
      field.append(area);
    }
    container.append(field);
    readers.push([name, read]);
  }
  return () => {
    const out = {};
    for (const [name, read] of readers) {
      const v = read();
      if (v !== undefined) out[name] = v;
      else if (required.has(name)) throw new Error(`${name} is required`);
    }
    return out;
  };
}

// ---------------------------------------------------------------- results

function renderContent(c) {
  const box = el("div", { class: "content", "data-type": c.type });
  box.append(el("div", { class: "kind-tag", text: c.type }));
  if (c.type === "text") box.append(el("pre", { text: c.text }));
  else if (c.type === "image") box.append(el("img", { src: `data:${c.mimeType};base64,${c.data}`, alt: "image result" }));
  else if (c.type === "audio") box.append(el("audio", { controls: true, src: `data:${c.mimeType};base64,${c.data}` }));
  else if (c.type === "resource") box.append(renderResource(c.resource || {}));
  else if (c.type === "resource_link") box.append(el("div", { text: `${c.name || ""} ${c.uri}` }));
  else box.append(el("pre", { text: json(c) }));
  return box;
}

function renderResource(r) {
  const box = el("div", { class: "resource" }, el("div", { class: "dim", text: `${r.uri || ""} ${r.mimeType || ""}` }));
  if (typeof r.text === "string") box.append(el("pre", { text: r.text }));
  else if (typeof r.blob === "string" && (r.mimeType || "").startsWith("image/")) box.append(el("img", { src: `data:${r.mimeType};base64,${r.blob}`, alt: r.uri }));
  else if (typeof r.blob === "string") box.append(el("div", { class: "dim", text: `${r.blob.length} base64 characters` }));
  return box;
}

function showResult(reply) {
  const out = $("result");
  out.replaceChildren();
  if (reply.error) {
    const e = reply.error;
    out.append(el("div", { class: "content rpc-error", "data-type": "error" }, el("div", { class: "kind-tag", text: "error" + (e.code !== undefined ? " " + e.code : "") }),
      el("pre", { text: e.message + (e.data !== undefined && e.data !== null ? "\n" + json(e.data) : "") })));
    return;
  }
  const r = reply.result || {};
  if (r.isError) out.append(el("p", { class: "err", text: "the tool reported an error (isError)" }));
  for (const c of r.content || []) {
    const box = renderContent(c);
    if (r.isError) box.classList.add("is-error");
    out.append(box);
  }
  for (const c of r.contents || []) out.append(el("div", { class: "content", "data-type": "resource" }, el("div", { class: "kind-tag", text: "resource" }), renderResource(c)));
  for (const m of r.messages || []) out.append(el("div", { class: "content", "data-type": "message" }, el("div", { class: "kind-tag", text: m.role }), renderContent(m.content || {})));
  if (r.structuredContent !== undefined) out.append(el("div", { class: "content", "data-type": "structured" }, el("div", { class: "kind-tag", text: "structured content" }), el("pre", { text: json(r.structuredContent) })));
  if (!out.children.length) out.append(el("pre", { class: "content", text: json(r) }));
}

function showCalls(calls) {
  const list = $("calls");
  list.replaceChildren();
  for (const c of calls) {
    const p = c.progress;
    const li = el("li", { class: "call", "data-n": String(c.n) }, `${c.kind} ${c.name}: waiting for the reply`);
    if (p) {
      li.append(el("progress", { value: p.progress, max: p.total || undefined }), `${p.progress}${p.total ? " / " + p.total : ""} ${p.message || ""}`);
    }
    list.append(li);
  }
}

// ---------------------------------------------------------------- elicitations

function showElicitations(list) {
  const box = $("elicitations");
  box.replaceChildren();
  for (const e of list) {
    const p = e.params || {};
    const form = el("form", { class: "elicitation", "data-n": String(e.n) },
      el("div", { class: "kind-tag", text: "the server asks (elicitation/create)" }), el("p", { text: p.message || "" }));
    const read = schemaFields(p.requestedSchema || { type: "object", properties: {} }, form, "elicit" + e.n);
    const answer = async (action) => {
      let response = { action };
      if (action === "accept") {
        try { response.content = read(); } catch (err) { alert(err.message); return; }
      }
      await api("/api/elicitation", { n: e.n, response });
    };
    form.onsubmit = (ev) => { ev.preventDefault(); answer("accept"); };
    form.append(el("div", { class: "buttons" },
      el("button", { type: "submit", class: "primary", text: "Accept" }),
      el("button", { type: "button", text: "Decline", onclick: () => answer("decline") }),
      el("button", { type: "button", text: "Cancel", onclick: () => answer("cancel") })));
    box.append(form);
  }
}

// ---------------------------------------------------------------- timeline

function labelOf(e) {
  if (e.kind === "junk") return "not JSON: " + e.raw;
  if (e.kind === "unreadable") return "unreadable frame: " + e.raw;
  if (e.kind === "invalid") return "invalid: " + JSON.stringify(e.msg);
  return e.label || e.method || (e.id !== null && e.id !== undefined ? "reply id " + JSON.stringify(e.id) : e.kind);
}

function makeRow(e) {
  const li = document.createElement("li");
  li.className = e.dir + (e.violations.length ? " violating" : "");
  li.dataset.seq = e.seq;
  const row = document.createElement("div");
  row.className = "row";
  const label = el("span", { class: "label" + (e.error ? " err" : "") });
  label.textContent = (e.kind === "notification" ? "• " : "") + labelOf(e) + (e.cancelled ? " (cancelled)" : "") + (e.result_type ? ` (${e.result_type})` : "");
  for (const v of e.violations) label.append(el("span", { class: "vbadge " + v.level, title: v.title, text: v.rule }));
  row.append(el("span", { class: "seq", text: "#" + e.seq }), el("span", { class: "t", text: e.t.toFixed(3) + " s" }),
    el("span", { class: "arrow", text: e.dir === "c2s" ? "→" : "←", title: e.dir === "c2s" ? "client to server" : "server to client" }),
    el("span", { class: "kind", text: e.kind }), label, el("span", { class: "ms", text: e.ms !== undefined ? e.ms.toFixed(1) + " ms" : "" }));
  row.addEventListener("click", () => toggleDetail(e.seq));
  li.append(row);
  return li;
}

function toggleDetail(seq) {
  const li = rows[seq];
  const open = li.querySelector(".detail");
  if (open) { open.remove(); return; }
  const e = entries[seq];
  const d = el("div", { class: "detail" });
  for (const v of e.violations) {
    d.append(el("div", { class: "violation " + v.level },
      el("div", {}, el("span", { class: "rule", text: v.rule }), ` [${v.level}] ${v.title} (by the ${v.side})`),
      el("div", { text: v.detail }), el("div", { class: "text", text: "rule: " + v.text }), el("div", { class: "hint", text: "fix: " + v.hint })));
  }
  if (overdue.has(seq)) d.append(el("div", { class: "violation SHOULD", text: "no reply yet: JSON-RPC 2.0 §4 says the server MUST reply to every request (only notifications go unanswered)" }));
  if (e.pair !== undefined) {
    d.append(el("div", {}, e.kind === "request" ? "answered by " : "answers ",
      el("span", { class: "pairlink", text: "#" + e.pair, onclick: () => reveal(e.pair) }), e.ms !== undefined ? ` after ${e.ms.toFixed(1)} ms` : ""));
  }
  d.append(el("pre", { text: e.raw !== undefined ? e.raw : json(e.msg) }));
  li.append(d);
}

function reveal(seq) {
  const li = rows[seq];
  if (!li) return;
  li.hidden = false;
  li.scrollIntoView({ block: "center" });
  li.classList.add("flash");
  setTimeout(() => li.classList.remove("flash"), 1200);
  if (!li.querySelector(".detail")) toggleDetail(seq);
}

function matches(e) {
  const dir = $("filter-dir").value, kind = $("filter-kind").value, text = $("search").value.trim().toLowerCase();
  if (dir && e.dir !== dir) return false;
  if (kind && e.kind !== kind) return false;
  if ($("filter-violations").checked && !e.violations.length && !overdue.has(e.seq)) return false;
  if (text) {
    if (e._text === undefined) e._text = (labelOf(e) + " " + JSON.stringify(e.msg) + " " + e.violations.map((v) => v.rule + " " + v.detail).join(" ")).toLowerCase();
    if (!e._text.includes(text)) return false;
  }
  return true;
}

function applyFilters() {
  let shown = 0;
  for (const e of entries) {
    const ok = matches(e);
    rows[e.seq].hidden = !ok;
    if (ok) shown++;
  }
  $("shown").textContent = `${shown} of ${entries.length}`;
}

function addEntries(list) {
  const frag = document.createDocumentFragment();
  for (const e of list) {
    entries[e.seq] = e;
    const li = makeRow(e);
    rows[e.seq] = li;
    li.hidden = !matches(e);
    frag.append(li);
    if (e.kind === "response" && e.pair !== undefined && entries[e.pair]) {
      // The request's latency and pairing arrive with its reply.
      const req = entries[e.pair];
      req.pair = e.seq;
      req.ms = e.ms;
      rows[e.pair].querySelector(".ms").textContent = e.ms.toFixed(1) + " ms";
      rows[e.pair].classList.remove("overdue");
    }
  }
  $("timeline").append(frag);
}

function showSummary(s) {
  summary = s;
  const box = $("summary");
  box.replaceChildren();
  const methods = Object.keys(s.by_method).length;
  box.append(el("div", {}, el("strong", { text: `${s.messages} messages` }), ` · ${methods} methods · `,
    el("strong", { class: s.violation_count ? "err" : "", id: "violation-count", text: `${s.violation_count} violations` }),
    ` · ${s.unanswered.length} unanswered`));
  for (const r of s.by_rule) {
    box.append(el("div", { class: "rule-line", "data-rule": r.rule, onclick: () => reveal(r.first) },
      el("span", { class: "vbadge " + r.level, text: r.rule }), ` ${r.title} × ${r.count}`));
  }
  overdue.clear();
  for (const u of s.unanswered) {
    if (u.overdue && u.seq !== null && rows[u.seq]) {
      overdue.add(u.seq);
      rows[u.seq].classList.add("overdue");
      box.append(el("div", { class: "rule-line", onclick: () => reveal(u.seq) },
        el("span", { class: "obadge", text: "unanswered" }), ` ${u.label} (id ${JSON.stringify(u.id)}) waiting ${u.age.toFixed(1)} s`));
    }
  }
  if (s.slowest.length) box.append(el("div", { class: "dim", text: "slowest: " + s.slowest.map((x) => `${x.label} ${x.ms.toFixed(1)} ms`).join(", ") }));
  $("shown").textContent = `${entries.filter((e) => !rows[e.seq].hidden).length} of ${entries.length}`;
}

async function poll() {
  for (;;) {
    try {
      const r = await api(`/api/timeline?since=${next}&wait=5&version=${version}`);
      addEntries(r.entries);
      next = r.next;
      version = r.version;
      showSummary(r.summary);
      showState(r.state);
    } catch (e) {
      await new Promise((ok) => setTimeout(ok, 1000));
    }
  }
}

// ---------------------------------------------------------------- wiring

function init() {
  $("export").href = "/api/export?token=" + encodeURIComponent(TOKEN);
  for (const b of document.querySelectorAll("#tabs button")) {
    b.addEventListener("click", () => {
      for (const o of document.querySelectorAll("#tabs button")) o.classList.toggle("active", o === b);
      tab = b.dataset.tab;
      showItems();
    });
  }
  $("refresh").addEventListener("click", async () => showState(await api("/api/refresh", {})));
  $("run-check").addEventListener("click", async () => {
    const panel = $("check-panel");
    panel.hidden = false;
    panel.open = true;
    $("check-verdict").textContent = "(running...)";
    $("check-report").textContent = "";
    const r = await api("/api/check", {});
    const s = r.json && r.json.summary;
    $("check-verdict").textContent = s ? `(${s.passed} passed, ${s.failed} failed, ${s.warnings} warnings; exit ${r.exit})` : `(exit ${r.exit})`;
    $("check-report").textContent = r.report;
  });
  for (const id of ["search", "filter-dir", "filter-kind", "filter-violations"]) $(id).addEventListener("input", applyFilters);
  poll();
}

init();
