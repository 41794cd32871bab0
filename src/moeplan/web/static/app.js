// moeplan serve: the page. It sends the form to the JSON API and draws what comes back; every figure
// is the library's (the same documents as `moeplan check|estimate|plan --json`). Nothing is fetched
// from anywhere but this server.
"use strict";

const GIB = 1024 ** 3;
const $ = (id) => document.getElementById(id);
const MEMORY_PARTS = [
  ["weights", "weights", "#4e79a7"],
  ["grads", "gradients", "#f28e2b"],
  ["optimizer", "optimizer", "#59a14f"],
  ["activations", "activations", "#e15759"],
  ["other", "other", "#9c755f"],
];
const TIME_COLORS = {
  dense_gemm: "#4e79a7", expert_gemm: "#a0cbe8", attention: "#e15759", memory_bound: "#9c755f",
  launch_overhead: "#bab0ac", recompute: "#ff9da7", tp_comm: "#f28e2b", cp_comm_exposed: "#edc948",
  ep_comm_exposed: "#59a14f", activation_offload: "#d4a6c8", pipeline_bubble: "#b07aa1",
  pp_comm: "#86bcb6", dp_comm_exposed: "#8cd17d", optimizer: "#499894",
};
const EXTRA_COLORS = ["#d37295", "#fabfd2", "#ffbe7d", "#79706e", "#f1ce63", "#b6992d"];

const state = {
  mode: "form", // form | yaml
  config: null, // {name, text} of an uploaded config.json
  plan: null, // the plan document
  selected: 0, // candidate index
  sort: { key: "rank", dir: 1 },
  selection: null, // the request whose layout is shown (for check and downloads)
};

// ---------- small helpers (formatting only) ----------
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}
function svg(tag, attrs = {}, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function num(v, digits = 0) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return Number(v).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}
function gib(bytes, digits = 1) { return num(bytes / GIB, digits); }
// a memory verdict with its reason (the model's verdict_band.text: the band against the usable HBM) and
// the parts of the peak stage that push it over (dominant_items)
function verdictText(mem) {
  const items = (mem.dominant_items || []).map((it) => `${gib(it.bytes)} GiB ${it.item}`).join(", ");
  const reason = (mem.verdict_band || {}).text;
  if (mem.verdict === "tight" && reason) return `tight: ${reason}${items ? `; largest: ${items}` : ""}`;
  if (mem.verdict === "tight") {
    const band = mem.error_band_pct !== null && mem.error_band_pct !== undefined ? ` ±${num(mem.error_band_pct)} %` : "";
    return `tight: may not fit (the peak${band} reaches the usable HBM${items ? `; largest: ${items}` : ""})`;
  }
  if (mem.verdict === "does-not-fit") return `does-not-fit: ${items || reason || ""}`;
  return mem.verdict;
}
function pct(f, digits = 1) { return f === null || f === undefined ? "–" : num(100 * f, digits) + " %"; }
function human(n) {
  if (n >= 1e12) return num(n / 1e12, 2) + " T";
  if (n >= 1e9) return num(n / 1e9, 1) + " B";
  if (n >= 1e6) return num(n / 1e6, 1) + " M";
  return num(n);
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function label(key) { return key.replace(/_exposed$/, "").replace(/_/g, " "); }

// ---------- the request ----------
function intOrRaw(id) {
  const raw = $(id).value.trim().replace(/[_,\s]/g, "");
  if (raw === "") return undefined;
  return /^\d+$/.test(raw) ? Number(raw) : $(id).value.trim(); // the server names a bad value
}
function formRequest() {
  const req = {};
  if (state.config) req.config_json = state.config.text;
  if (state.mode === "yaml") {
    req.scenario_yaml = $("f-scenario_yaml").value;
    return req;
  }
  if (!state.config) req.model = $("f-model").value || undefined;
  req.gpu = $("f-gpu").value || undefined;
  for (const k of ["num_gpus", "seq_length", "mbs", "tp", "pp", "vpp", "cp", "ep", "etp"]) req[k] = intOrRaw("f-" + k);
  const batch = intOrRaw("f-batch");
  if (batch !== undefined) req[$("f-batch_unit").value] = batch;
  req.precision = $("f-precision").value || undefined;
  const sets = $("f-sets").value.split("\n").map((s) => s.trim()).filter(Boolean);
  if (sets.length) req.sets = sets;
  for (const k of Object.keys(req)) if (req[k] === undefined) delete req[k];
  return req;
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw { message: "the moeplan server does not answer (is `moeplan serve` still running?)" };
  }
  let doc;
  try { doc = await resp.json(); } catch (e) { doc = { error: { message: `answer ${resp.status} is not JSON` } }; }
  if (!resp.ok) throw (doc && doc.error) || { message: `error ${resp.status}` };
  return doc;
}

// ---------- errors beside their fields ----------
function clearErrors() {
  for (const e of document.querySelectorAll("[data-error-for]")) e.textContent = "";
  for (const e of document.querySelectorAll(".field-invalid")) e.classList.remove("field-invalid");
  $("form-error").hidden = true;
}
const INPUT_IDS = {
  model: "f-model", config_json: "f-config", gpu: "f-gpu", num_gpus: "f-num_gpus", seq_length: "f-seq_length",
  gbs: "f-batch", tokens_per_step: "f-batch", precision: "f-precision", mbs: "f-mbs", tp: "f-tp", pp: "f-pp",
  vpp: "f-vpp", cp: "f-cp", ep: "f-ep", etp: "f-etp", sets: "f-sets", scenario_yaml: "f-scenario_yaml", top: "f-top",
};
function showError(err) {
  const where = err.input && document.querySelector(`[data-error-for="${err.input}"]`);
  const input = err.input && INPUT_IDS[err.input] && $(INPUT_IDS[err.input]);
  if (where && input && input.offsetParent !== null) { // beside its field, when that field is on show
    where.textContent = err.message;
    input.classList.add("field-invalid");
    input.focus();
  } else {
    $("form-error").textContent = err.message;
    $("form-error").hidden = false;
  }
}

function busy(text) {
  $("busy").hidden = !text;
  $("busy-text").textContent = text || "";
  for (const b of document.querySelectorAll("#form button")) b.disabled = !!text;
}

// ---------- actions ----------
async function runPlan() {
  clearErrors();
  const req = formRequest();
  const top = intOrRaw("f-top");
  if (top !== undefined) req.top = top;
  busy("Planning: searching TP, PP, VPP, CP, EP, ETP, MBS, recompute and knobs (a few seconds)…");
  try {
    const doc = await api("/api/plan", req);
    state.plan = doc;
    state.request = req;
    state.sort = { key: "rank", dir: 1 };
    $("welcome").hidden = true;
    renderPlan();
    if (doc.candidates.length) await select(0);
    else hideSelection();
  } catch (err) {
    showError(err);
  } finally {
    busy(null);
  }
}

async function runEstimate() {
  clearErrors();
  const req = formRequest();
  busy("Checking the rules and estimating memory and step time…");
  try {
    const [check, est] = await Promise.all([api("/api/check", req), api("/api/estimate", req)]);
    state.plan = null;
    state.selection = req;
    $("welcome").hidden = true;
    $("plan-card").hidden = true;
    $("why-card").hidden = true;
    $("selected-title").textContent = "Your layout";
    $("selected-label").textContent = describeParallel(est.scenario.parallel);
    showSelection();
    renderCheck(check);
    renderMemory(est.memory, est.scenario);
    // a step timed despite an error, or with the check's fix applied, says so above the figures
    renderTime(est.throughput, est.check, (est.timed_despite || est.fixed || {}).text);
  } catch (err) {
    showError(err);
  } finally {
    busy(null);
  }
}

function describeParallel(p) {
  if (!p) return "";
  return ["TP", "PP", "VPP", "CP", "EP", "ETP", "DP", "EDP"]
    .filter((k) => p[k] !== null && p[k] !== undefined).map((k) => `${k}${p[k]}`).join(" ");
}

function requestFor(scenario) {
  const req = { scenario };
  if (state.config) req.config_json = state.config.text;
  return req;
}

async function select(i) {
  state.selected = i;
  const c = state.plan.candidates[i];
  state.selection = requestFor(state.plan.scenarios[i]);
  for (const tr of $("plan-table").tBodies[0].rows) tr.classList.toggle("selected", Number(tr.dataset.index) === i);
  $("selected-title").textContent = `Candidate #${c.rank}`;
  const knobs = Object.entries(c.knobs || {}).map(([k, v]) => `${label(k)} ${v}`).join(", ");
  // a trade-off the candidate rests on is said on its card; the full statement is under "why"
  const nan = c.nan_check_off ? " · loss NaN check off (full-iteration CUDA graph)" : "";
  $("selected-label").textContent = `${c.label} · DP${c.dp} · MBS ${c.training.micro_batch_size} · recompute ${c.recompute} · ${knobs}${nan}`;
  showSelection();
  renderMemory(c.memory, null);
  renderTime(c.throughput, null);
  renderWhy(i);
  $("export-box").hidden = true;
  try {
    renderCheck(await api("/api/check", state.selection));
  } catch (err) {
    showError(err);
  }
}

function showSelection() {
  $("selected-card").hidden = false;
  $("charts").hidden = false;
  $("check-card").hidden = false;
  $("export-box").hidden = true;
}
function hideSelection() {
  for (const id of ["selected-card", "charts", "check-card"]) $(id).hidden = true;
}

async function download(format) {
  if (!state.selection) return;
  clearErrors();
  try {
    const out = await api("/api/export", { ...state.selection, format });
    $("export-box").hidden = false;
    $("export-name").textContent = out.filename;
    const notes = clear($("export-notes"));
    if (out.refused) {
      notes.append(el("li", { class: "sev-error", text: `not exported: the layout breaks ${[...new Set(out.broken_rules)].join(", ")} (see the check below)` }));
      $("export-preview").textContent = "";
      return;
    }
    for (const w of out.warnings || []) notes.append(el("li", { class: "sev-warning", text: w }));
    for (const n of out.notes || []) notes.append(el("li", { class: "muted", text: n }));
    $("export-preview").textContent = out.text;
    const blob = new Blob([out.text], { type: "text/plain" });
    const a = el("a", { href: URL.createObjectURL(blob), download: out.filename });
    document.body.append(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  } catch (err) {
    showError(err);
  }
}

// ---------- plan ----------
const PLAN_COLUMNS = [
  ["rank", "#", (c) => c.rank, (c) => c.rank, "num"],
  ["label", "layout", (c) => c.label, (c) => c.label, "layout-label"],
  ["dp", "DP", (c) => c.dp, (c) => c.dp, "num"],
  ["mbs", "MBS", (c) => c.training.micro_batch_size, (c) => c.training.micro_batch_size, "num"],
  ["recompute", "recompute · offload", (c) => c.recompute.replace(/,/g, ",\u200b"), (c) => c.recompute, "recompute"],
  ["peak", "peak GiB", (c) => num(c.memory.peak_gib, 1), (c) => c.memory.peak_gib, "num"],
  ["tps", "tokens/s/GPU", (c) => num(c.throughput.tokens_per_s_per_gpu), (c) => c.throughput.tokens_per_s_per_gpu, "num"],
  ["tflops", "TFLOP/s", (c) => num(c.throughput.model_tflops_per_gpu), (c) => c.throughput.model_tflops_per_gpu, "num"],
  ["mfu", "MFU", (c) => pct(c.throughput.mfu), (c) => c.throughput.mfu, "num"],
];

function renderPlan() {
  const doc = state.plan;
  $("plan-card").hidden = false;
  $("plan-summary").textContent =
    `${doc.request.model} · ${doc.request.num_gpus} × ${doc.request.gpu} · ${num(doc.request.seq_length)} tokens · ` +
    `GBS ${doc.request.global_batch_size} · ${doc.request.precision || ""} — ${num(doc.considered_layouts)} layouts considered, ` +
    `${num(doc.fitting_layouts)} fit, ${num(doc.refined_variants)} variants refined in ${num(doc.seconds, 1)} s`;
  const columns = PLAN_COLUMNS.slice();
  if (doc.candidates.some((c) => c.days !== undefined && c.days !== null)) {
    columns.push(["days", "days", (c) => num(c.days, 1), (c) => c.days, "num"]);
  }
  const head = clear($("plan-table").tHead);
  const tr = el("tr");
  for (const [key, title, , , cls] of columns) {
    const th = el("th", { class: cls === "num" ? "num" : "", "data-key": key, text: title, title: "sort by " + title });
    if (state.sort.key === key) th.classList.add(state.sort.dir > 0 ? "sorted-asc" : "sorted-desc");
    th.addEventListener("click", () => {
      state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : (cls === "num" && key !== "rank" && key !== "peak" ? -1 : 1) };
      renderPlan();
    });
    tr.append(th);
  }
  head.append(tr);
  const body = clear($("plan-table").tBodies[0]);
  const col = columns.find((c) => c[0] === state.sort.key) || columns[0];
  const order = doc.candidates.map((c, i) => i).sort((a, b) => {
    const va = col[3](doc.candidates[a]), vb = col[3](doc.candidates[b]);
    return (va < vb ? -1 : va > vb ? 1 : 0) * state.sort.dir || a - b;
  });
  for (const i of order) {
    const c = doc.candidates[i];
    const row = el("tr", { "data-index": String(i) });
    if (i === state.selected) row.classList.add("selected");
    for (const [, , show, , cls] of columns) row.append(el("td", { class: cls, text: String(show(c)) }));
    row.addEventListener("click", () => select(i));
    body.append(row);
  }
  $("plan-empty").hidden = doc.candidates.length > 0;
  $("plan-empty").textContent = doc.candidates.length ? "" :
    "Nothing fits: every layout breaks a rule or runs out of memory (the tally below says why). Try more GPUs, a shorter sequence, FP8, or fewer held keys.";
  const notes = clear($("plan-notes"));
  for (const n of [...(doc.assumptions || []), ...(doc.notes || [])]) notes.append(el("li", { class: "muted small", text: n }));
  renderBaseline();
  $("why-card").hidden = false;
}

function renderWhy(i) {
  const c = state.plan.candidates[i];
  $("why-title").textContent = i === 0 ? "Why #1 wins" : `#${c.rank} against #1`;
  const ul = clear($("why"));
  for (const line of c.explanation || []) ul.append(el("li", { text: line }));
  for (const w of c.warnings || []) ul.append(el("li", { class: "sev-warning", text: w }));
}

function renderBaseline() {
  const doc = state.plan;
  const ul = clear($("baseline"));
  const rot = doc.baseline && doc.baseline.rule_of_thumb;
  if (rot) {
    const c = rot.candidate;
    ul.append(el("li", {
      text: `${rot.rule}: ` + (c ? `${c.label}, ${num(c.throughput.tokens_per_s_per_gpu)} tokens/s/GPU, peak ${num(c.memory.peak_gib, 1)} GiB` : "nothing fits") +
        (rot.search_gain_pct !== null && rot.search_gain_pct !== undefined ? ` — the search's #1 is ${num(rot.search_gain_pct, 1)} % faster` : ""),
    }));
  }
  const fam = doc.baseline && doc.baseline.family;
  if (fam) {
    let text = `guidance family ${fam.family} (${fam.recipe}): as written ${fam.check ? fam.check.verdict : "?"}`;
    if (fam.memory) text += `, peak ${num(fam.memory.peak_gib, 1)} GiB (${verdictText(fam.memory)})`;
    if (fam.completed) text += `; completed: ${fam.completed.label}, ${num(fam.completed.tokens_per_s_per_gpu)} tokens/s/GPU`;
    ul.append(el("li", { text }));
  }
  if (!ul.childElementCount) ul.append(el("li", { class: "muted", text: "none for this request" }));
  const body = clear($("rejected").tBodies[0]);
  for (const r of doc.rejected || []) {
    body.append(el("tr", {}, el("td", { text: r.reason }), el("td", { class: "num", text: num(r.count) }), el("td", { class: "muted", text: r.example || "" })));
  }
  if (!body.childElementCount) body.append(el("tr", {}, el("td", { class: "muted", text: "nothing rejected" })));
}

// ---------- check ----------
function renderCheck(doc) {
  const v = $("verdict");
  v.textContent = doc.verdict;
  v.className = "verdict " + doc.verdict;
  const counts = doc.counts || {};
  $("check-counts").textContent = `${counts.error || 0} errors · ${counts.warning || 0} warnings · ${counts.info || 0} notes`;
  const s = doc.scenario || {};
  $("check-scenario").textContent = [s.model, s.num_gpus && s.gpu ? `${s.num_gpus} × ${s.gpu}` : s.gpu, s.framework, s.megatron_core_version && `megatron-core ${s.megatron_core_version}`].filter(Boolean).join(" · ");
  const body = clear($("findings").tBodies[0]);
  for (const f of doc.findings || []) {
    body.append(el("tr", {},
      el("td", { class: "sev-" + f.severity, text: f.severity }),
      el("td", { class: "mono small", text: f.rule_id }),
      el("td", { text: f.message }),
      el("td", { class: "small", text: f.fix || "" })));
  }
  if (!body.childElementCount) body.append(el("tr", {}, el("td", { colspan: "4", class: "muted", text: "no findings: every rule passes" })));
  const defaults = (s.resolved_defaults || []);
  $("defaults-count").textContent = String(defaults.length);
  const ul = clear($("defaults"));
  for (const d of defaults) ul.append(el("li", { text: `${d.key} = ${JSON.stringify(d.value)} — ${d.reason}` }));
}

// ---------- memory chart ----------
function renderMemory(mem, scenario) {
  const chart = clear($("memory-chart"));
  clear($("memory-legend"));
  clear($("memory-peak"));
  if (!mem) {
    chart.append(el("p", { class: "muted", text: "No memory estimate: the layout does not fold into the world size (see the check)." }));
    $("memory-verdict").textContent = "";
    return;
  }
  const stages = mem.stages || [];
  const capacity = mem.capacity_bytes !== undefined ? mem.capacity_bytes : (mem.capacity_gib || 0) * GIB;
  const peakBytes = mem.peak_bytes !== undefined ? mem.peak_bytes : (mem.peak_gib || 0) * GIB;
  const figs = mem.peak_allocated_bytes !== undefined
    ? ` (torch max allocated ${gib(mem.peak_allocated_bytes)}, max reserved ${gib(mem.peak_reserved_bytes)} GiB)`
    : "";
  $("memory-verdict").textContent = `peak device use ${gib(peakBytes)} GiB${figs} of ${gib(capacity)} GiB usable · ${verdictText(mem)}`;
  const W = 460, H = 250, left = 44, right = 10, top = 12, bottom = 30;
  const maxV = Math.max(capacity, ...stages.map((s) => s.total_bytes)) * 1.08 || 1;
  const y = (v) => top + (H - top - bottom) * (1 - v / maxV);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "memory per pipeline stage", id: "memory-svg" });
  const step = niceStep(maxV / GIB);
  for (let g = 0; g * GIB <= maxV; g += step) {
    root.append(svg("line", { x1: left, x2: W - right, y1: y(g * GIB), y2: y(g * GIB), stroke: "#eceff3" }));
    root.append(svg("text", { x: left - 5, y: y(g * GIB) + 4, "text-anchor": "end", "font-size": 10, fill: "#5f6b7a" }, num(g)));
  }
  root.append(svg("text", { x: 10, y: top + 2, "font-size": 10, fill: "#5f6b7a", transform: `rotate(-90 10 ${top + 2})`, "text-anchor": "end" }, "GiB per GPU"));
  const n = Math.max(stages.length, 1);
  const slot = (W - left - right) / n, bw = Math.min(56, slot * 0.7);
  stages.forEach((s, i) => {
    const x = left + slot * i + (slot - bw) / 2;
    let acc = 0;
    for (const [key, name, color] of MEMORY_PARTS) {
      const v = s[key + "_bytes"] || 0;
      if (v <= 0) continue;
      const r = svg("rect", { x, y: y(acc + v), width: bw, height: Math.max(0, y(acc) - y(acc + v)), fill: color });
      r.append(svg("title", {}, `stage ${s.stage} ${name}: ${gib(v, 2)} GiB`));
      root.append(r);
      acc += v;
    }
    for (const [key, dash, label] of [["peak_allocated_bytes", "", "torch max allocated"], ["peak_reserved_bytes", "3 2", "max reserved"]]) {
      const v = s[key];
      if (!(v > 0)) continue;
      const t = svg("line", { x1: x - 4, x2: x + bw + 4, y1: y(v), y2: y(v), stroke: "#1d2330", "stroke-width": 1.5, "stroke-dasharray": dash, class: "mem-tick" });
      t.append(svg("title", {}, `stage ${s.stage} ${label}: ${gib(v, 2)} GiB`));
      root.append(t);
    }
    if (s.stage === mem.peak_stage) {
      root.append(svg("rect", { x: x - 1.5, y: y(s.total_bytes) - 1.5, width: bw + 3, height: y(0) - y(s.total_bytes) + 3, fill: "none", stroke: "#1d2330", "stroke-width": 1.5 }));
    }
    if (n <= 16 || i % Math.ceil(n / 16) === 0) {
      root.append(svg("text", { x: x + bw / 2, y: H - bottom + 13, "text-anchor": "middle", "font-size": 10, fill: "#1d2330" }, String(s.stage)));
    }
  });
  root.append(svg("text", { x: left + (W - left - right) / 2, y: H - 4, "text-anchor": "middle", "font-size": 10, fill: "#5f6b7a" }, "pipeline stage (outlined: the peak)"));
  if (capacity > 0) {
    root.append(svg("line", { x1: left, x2: W - right, y1: y(capacity), y2: y(capacity), stroke: "#b42318", "stroke-dasharray": "5 4", "stroke-width": 1.5 }));
    root.append(svg("text", { x: W - right - 2, y: y(capacity) - 4, "text-anchor": "end", "font-size": 10, fill: "#b42318", stroke: "#fff", "stroke-width": 3, "paint-order": "stroke" }, `usable ${gib(capacity)} GiB`));
  }
  chart.append(root);
  const legend = $("memory-legend");
  for (const [, name, color] of MEMORY_PARTS) legend.append(el("span", { class: "item" }, el("span", { class: "swatch", style: `background:${color}` }), name));
  legend.append(el("span", { class: "item" }, el("span", { class: "swatch", style: "background:none;border-top:2px dashed #b42318;height:0;margin-top:2px" }), "usable HBM"));
  legend.append(el("span", { class: "item" }, el("span", { class: "swatch", style: "background:none;border-top:2px solid #1d2330;height:0;margin-top:2px" }), "torch max allocated"));
  legend.append(el("span", { class: "item" }, el("span", { class: "swatch", style: "background:none;border-top:2px dotted #1d2330;height:0;margin-top:2px" }), "max reserved (bar: device use)"));
  renderPeak(mem, stages);
}

function niceStep(maxGiB) {
  const raw = maxGiB / 5;
  const p = 10 ** Math.floor(Math.log10(raw || 1));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function renderPeak(mem, stages) {
  const s = stages.find((x) => x.stage === mem.peak_stage);
  if (!s) return;
  const table = el("table", { class: "data peak-table", id: "peak-items" });
  table.append(el("tr", {}, el("th", { text: `peak stage ${s.stage} (${s.num_layers} layers, ${num(s.inflight_microbatches, 2)} microbatches in flight)` }), el("th", { class: "num", text: "GiB" })));
  for (const [key, name, color] of MEMORY_PARTS) {
    const items = (s.items || {})[key] || {};
    const parts = Object.entries(items).filter(([, v]) => v > 0).map(([k, v]) => `${label(k)} ${gib(v, 2)}`);
    table.append(el("tr", {},
      el("td", {}, el("span", { class: "swatch", style: `background:${color};margin-right:6px` }), name, el("span", { class: "muted small", text: parts.length ? " — " + parts.join(", ") : "" })),
      el("td", { class: "num", text: gib(s[key + "_bytes"] || 0, 2) })));
  }
  table.append(el("tr", {}, el("td", { text: "total" }), el("td", { class: "num", text: gib(s.total_bytes, 2) })));
  if (s.host_bytes) table.append(el("tr", {}, el("td", { class: "muted", text: "on the host (optimizer offload)" }), el("td", { class: "num", text: gib(s.host_bytes, 2) })));
  $("memory-peak").append(table);
}

// ---------- step time chart ----------
function renderTime(thr, check, note) {
  const chart = clear($("time-chart"));
  const metrics = clear($("time-metrics"));
  clear($("time-legend"));
  clear($("time-band"));
  if (!thr) {
    const why = check && (check.verdict === "invalid" || check.verdict === "unsupported")
      ? "No step time: the layout breaks a rule (see the check)."
      : "No step time: give a batch per step (global batch size or tokens).";
    chart.append(el("p", { class: "muted", text: why }));
    $("time-summary").textContent = "";
    return;
  }
  $("time-summary").textContent = `${num(thr.step_time_s, 2)} s per step · ${thr.num_microbatches} microbatches`;
  if (note) chart.append(el("p", { class: "sev-error", text: note }));
  const tiles = [
    [num(thr.tokens_per_s_per_gpu), "tokens/s/GPU"],
    [num(thr.model_tflops_per_gpu), "model TFLOP/s/GPU"],
    [pct(thr.mfu), `MFU (${thr.mfu_peak || "dense BF16"} peak)`],
    [num(thr.step_time_s, 2) + " s", "step time"],
  ];
  for (const [v, k] of tiles) metrics.append(el("div", { class: "metric" }, el("div", { class: "v", text: v }), el("div", { class: "k", text: k })));
  const parts = Object.entries(thr.breakdown_s || {}).filter(([, v]) => v > 0);
  const total = parts.reduce((a, [, v]) => a + v, 0) || 1;
  const W = 460, H = 34;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "step time breakdown", id: "time-svg" });
  let x = 0, extra = 0;
  const colorOf = {};
  for (const [k, v] of parts) {
    colorOf[k] = TIME_COLORS[k] || EXTRA_COLORS[extra++ % EXTRA_COLORS.length];
    const w = (W * v) / total;
    const r = svg("rect", { x, y: 4, width: Math.max(w, 0.5), height: H - 8, fill: colorOf[k] });
    r.append(svg("title", {}, `${label(k)}: ${num(v, 2)} s (${num((100 * v) / total, 1)} %)`));
    root.append(r);
    if (w > 34) root.append(svg("text", { x: x + w / 2, y: H / 2 + 4, "text-anchor": "middle", "font-size": 10, fill: "#fff" }, `${num((100 * v) / total, 0)}%`));
    x += w;
  }
  chart.append(root);
  const table = el("table", { id: "time-items" });
  for (const [k, v] of parts.slice().sort((a, b) => b[1] - a[1])) {
    table.append(el("tr", {},
      el("td", {}, el("span", { class: "swatch", style: `background:${colorOf[k]}` })),
      el("td", { text: label(k) }),
      el("td", { class: "num", text: num(v, 2) + " s" }),
      el("td", { class: "num muted", text: num((100 * v) / total, 1) + " %" })));
  }
  const hidden = Object.entries(thr.hidden_s || {}).filter(([, v]) => v > 0);
  if (hidden.length) {
    table.append(el("tr", {}, el("td", {}), el("td", { colspan: "3", class: "muted", text: "hidden by overlap / saved: " + hidden.map(([k, v]) => `${label(k)} ${num(v, 2)} s`).join(", ") })));
  }
  $("time-legend").append(table);
  const val = thr.validity || {};
  const band = val.error_band_pct !== undefined && val.error_band_pct !== null ? `error band ±${num(val.error_band_pct, 0)} %` : "";
  const where = val.validated ? "inside the measured runs the model was fitted on" : "outside the measured runs: " + (val.outside || []).join("; ");
  const p = clear($("time-band"));
  if (band) p.append(el("b", { text: band }), " · ");
  p.append([where, ...(thr.assumptions || [])].filter(Boolean).join(" · "));
}

// ---------- set-up ----------
async function init() {
  try {
    const [opts, models, gpus] = await Promise.all([api("/api/options"), api("/api/models"), api("/api/gpus")]);
    $("version").textContent = "moeplan " + opts.version;
    const mSel = $("f-model");
    for (const m of models) {
      mSel.append(el("option", { value: m.id, text: `${m.id} — ${m.kind}, ${human(m.total_params)} params` }));
    }
    mSel.value = "Qwen/Qwen3-30B-A3B";
    const gSel = $("f-gpu");
    for (const g of gpus) gSel.append(el("option", { value: g.id, text: `${g.id} — ${num(g.usable_hbm_gib, 0)} GiB` }));
    gSel.value = "h100";
    const pSel = $("f-precision");
    for (const p of opts.precisions) pSel.append(el("option", { value: p, text: p }));
    pSel.value = "bf16";
    const keys = $("layout-keys");
    for (const k of opts.layout_keys) keys.append(el("option", { value: k + "=" }));
  } catch (err) {
    showError(err);
  }
}

function setMode(mode) {
  state.mode = mode;
  $("mode-form").hidden = mode !== "form";
  $("mode-yaml").hidden = mode !== "yaml";
  $("tab-form").classList.toggle("active", mode === "form");
  $("tab-yaml").classList.toggle("active", mode === "yaml");
  clearErrors();
}

document.addEventListener("DOMContentLoaded", () => {
  init();
  $("form").addEventListener("submit", (e) => { e.preventDefault(); runPlan(); });
  $("btn-estimate").addEventListener("click", runEstimate);
  for (const t of document.querySelectorAll(".tab")) t.addEventListener("click", () => setMode(t.dataset.mode));
  for (const b of document.querySelectorAll("button.dl")) b.addEventListener("click", () => download(b.dataset.format));
  $("export-close").addEventListener("click", () => { $("export-box").hidden = true; });
  $("f-config").addEventListener("change", async (e) => {
    const f = e.target.files[0];
    if (!f) return;
    state.config = { name: f.name, text: await f.text() };
    $("config-name").textContent = `using ${f.name}`;
    $("config-clear").hidden = false;
    $("f-model").disabled = true;
  });
  $("config-clear").addEventListener("click", () => {
    state.config = null;
    $("f-config").value = "";
    $("config-name").textContent = "";
    $("config-clear").hidden = true;
    $("f-model").disabled = false;
  });
  $("f-scenario_file").addEventListener("change", async (e) => {
    const f = e.target.files[0];
    if (f) $("f-scenario_yaml").value = await f.text();
  });
});
