// The search page of `pyterrier-sci serve`: a query box, the served pipelines, results with titles and
// snippets. Keyboard: "/" focuses the query box, Enter searches, Tab walks the results, "s" on a focused
// result asks for papers similar to it. The URL keeps the search (?q=...&pipeline=...&k=...).
"use strict";
const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem("pyterrier-sci-token") || "" };

async function api(path) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const r = await fetch(path, { headers });
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (r.status === 401) { $("auth").hidden = false; }
  if (!r.ok) {
    const msg = body && body.error ? body.error.message : ("HTTP " + r.status);
    throw new Error(msg);
  }
  return body;
}

function setStatus(text, error) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

function render(data, what) {
  const list = $("results");
  list.replaceChildren();
  for (const hit of data.results) {
    const li = document.createElement("li");
    li.className = "result";
    li.dataset.docno = hit.docno;
    li.tabIndex = 0;
    const h = document.createElement("h2");
    h.textContent = hit.title || hit.docno;
    const p = document.createElement("p");
    p.className = "snippet";
    p.textContent = hit.snippet;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = "docno " + hit.docno + " \u00b7 score " + hit.score.toFixed(4);
    const more = document.createElement("button");
    more.type = "button";
    more.textContent = "Similar papers";
    more.addEventListener("click", () => similar(hit.docno));
    meta.appendChild(more);
    li.append(h, p, meta);
    list.appendChild(li);
  }
  setStatus(data.results.length + " results " + what + " (" + data.pipeline + ", " + data.took_ms.toFixed(1) + " ms)");
  document.body.dataset.searched = String(Date.now());
}

function params() {
  return new URLSearchParams({ k: $("k").value || "10", pipeline: $("pipeline").value });
}

async function search() {
  const q = $("q").value.trim();
  if (!q) { setStatus("Type a query.", true); return; }
  const p = params();
  p.set("q", q);
  history.replaceState(null, "", "?" + p.toString());
  setStatus("Searching\u2026");
  try { render(await api("/v1/search?" + p.toString()), "for \u201c" + q + "\u201d"); }
  catch (e) { $("results").replaceChildren(); setStatus(e.message, true); }
}

async function similar(docno) {
  const p = params();
  p.set("docno", docno);
  setStatus("Searching\u2026");
  try { render(await api("/v1/similar?" + p.toString()), "similar to " + docno); }
  catch (e) { setStatus(e.message, true); }
}

async function init() {
  $("token").addEventListener("change", () => {
    state.token = $("token").value;
    sessionStorage.setItem("pyterrier-sci-token", state.token);
    init();
  });
  let info;
  try { info = await api("/v1/pipelines"); }
  catch (e) { setStatus(e.message, true); return; }
  const sel = $("pipeline");
  sel.replaceChildren();
  for (const p of info.pipelines) {
    const o = document.createElement("option");
    o.value = p.name;
    o.textContent = p.name;
    o.title = p.description;
    sel.appendChild(o);
  }
  $("k").max = String(info.limits.max_k);
  $("dataset").textContent = info.dataset ? "Dataset: " + info.dataset : "";
  const url = new URLSearchParams(location.search);
  if (url.get("pipeline")) sel.value = url.get("pipeline");
  if (url.get("k")) $("k").value = url.get("k");
  if (url.get("q")) { $("q").value = url.get("q"); search(); }
  document.body.dataset.ready = "1";
}

$("search").addEventListener("submit", (ev) => { ev.preventDefault(); search(); });
document.addEventListener("keydown", (ev) => {
  const t = ev.target;
  const typing = t instanceof HTMLInputElement || t instanceof HTMLSelectElement;
  if (ev.key === "/" && !typing) { ev.preventDefault(); $("q").focus(); $("q").select(); }
  if (ev.key === "s" && !typing && t.classList && t.classList.contains("result")) similar(t.dataset.docno);
});
init();
