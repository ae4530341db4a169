"""The static page of the trajectory viewer: HTML skeleton, inline CSS and vanilla JavaScript.

``__TITLE__`` (HTML-escaped) and ``__DATA__`` (JSON from :func:`viewer.embed_json`) are filled
in by :mod:`agentmath.report.viewer`. The script reads the JSON with ``JSON.parse`` and builds
the DOM with ``createElement``/``textContent`` only, so no data is ever parsed as HTML.
"""

from __future__ import annotations

CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;
background:#f6f8fa;height:100vh;display:flex;flex-direction:column}
header{display:flex;gap:12px;align-items:center;padding:8px 14px;background:#24292f;color:#fff;
flex-wrap:wrap}
header h1{font-size:16px;margin:0 8px 0 0}
header .summary{color:#d0d7de;font-size:13px}
select,input{font:inherit;padding:3px 6px;border:1px solid #d0d7de;border-radius:6px}
#wrap{flex:1;display:flex;min-height:0}
#side{width:300px;min-width:220px;border-right:1px solid #d0d7de;display:flex;
flex-direction:column;background:#fff}
#side .controls{padding:8px;display:flex;flex-direction:column;gap:6px;
border-bottom:1px solid #d0d7de}
#plist{list-style:none;margin:0;padding:0;overflow:auto;flex:1}
#plist li{padding:6px 10px;border-bottom:1px solid #eaeef2;cursor:pointer;display:flex;
justify-content:space-between;gap:6px;font-size:13px}
#plist li:hover{background:#f3f4f6}
#plist li.active{background:#ddf4ff}
#plist .pid{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
#main{flex:1;overflow:auto;padding:14px 20px}
.card{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:12px 14px;
margin-bottom:12px}
.card h2{font-size:15px;margin:0 0 8px}
.meta{color:#57606a;font-size:12px}
.text{white-space:pre-wrap;word-wrap:break-word}
.kv{display:flex;flex-wrap:wrap;gap:6px 16px;margin-top:8px}
.kv b{font-weight:600}
.badge{display:inline-block;padding:1px 7px;border-radius:10px;font-size:12px;font-weight:600;
background:#eaeef2;color:#24292f;margin-left:4px}
.ok{background:#dafbe1;color:#116329}.bad{background:#ffebe9;color:#a40e26}
.warn{background:#fff8c5;color:#7d4e00}
#samples{display:flex;gap:4px;flex-wrap:wrap;margin:6px 0}
#samples button{font:inherit;border:1px solid #d0d7de;border-radius:6px;padding:2px 9px;
cursor:pointer;background:#fff}
#samples button.ok{border-color:#4ac26b}#samples button.bad{border-color:#ff8182}
#samples button.active{outline:2px solid #0969da}
.seg{margin:8px 0}
.seg.model .text{background:#fff;border-left:3px solid #8c959f;padding:4px 10px}
details.prompt summary{cursor:pointer;color:#57606a}
details.prompt .text{background:#f6f8fa;padding:6px 10px;font-size:12px}
pre{margin:4px 0;padding:8px 10px;border-radius:6px;overflow:auto;
font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;white-space:pre-wrap;
word-wrap:break-word}
pre.code{background:#0d1117;color:#e6edf3}
pre.code .k{color:#ff7b72}pre.code .s{color:#a5d6ff}pre.code .n{color:#79c0ff}
pre.code .c{color:#8b949e;font-style:italic}pre.code .b{color:#d2a8ff}
.tool{border:1px solid #d0d7de;border-radius:8px;padding:6px 10px;background:#fff}
.tool.error{border-color:#ff8182}.tool.timeout{border-color:#d4a72c}
.tool .head{font-size:12px;color:#57606a}
pre.out{background:#f6f8fa;border:1px solid #eaeef2}
pre.stderr{background:#fff8c5}
pre.err{background:#ffebe9;color:#a40e26;border:1px solid #ff8182}
.note{color:#9a6700;font-size:12px;font-style:italic}
.empty{color:#57606a;padding:20px}
"""

JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("viewer-data").textContent);
  var state = {run: 0, problem: 0, sample: 0};
  var KW = new Set(("False None True and as assert async await break class continue def del " +
    "elif else except finally for from global if import in is lambda nonlocal not or pass " +
    "raise return try while with yield match case").split(" "));
  var BUILTIN = new Set(("print range len int float str list dict set tuple abs min max sum " +
    "sorted round pow divmod enumerate zip map filter any all isinstance").split(" "));
  var TOKEN = new RegExp(
    "(#[^\\n]*)|((?:[rRbBuUfF]{1,2})?(?:\"\"\"[\\s\\S]*?(?:\"\"\"|$)|'''[\\s\\S]*?(?:'''|$)|" +
    "\"(?:\\\\.|[^\"\\\\\\n])*\"?|'(?:\\\\.|[^'\\\\\\n])*'?))|" +
    "(\\b(?:0[xXoObB][0-9a-fA-F_]+|\\d[\\d_]*\\.?[\\d_]*(?:[eE][+-]?\\d+)?j?)|" +
    "\\.\\d+(?:[eE][+-]?\\d+)?)|([A-Za-z_][A-Za-z0-9_]*)", "g");
  var FENCE = /```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n([\s\S]*?)(?:\n[ \t]*```|$)/g;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function pct(v) { return typeof v === "number" ? (100 * v).toFixed(1) + "%" : "-"; }
  function show(v) { return v === null || v === undefined || v === "" ? "-" : String(v); }

  function highlight(code) {
    var pre = el("pre", "code"), last = 0, m, cls;
    TOKEN.lastIndex = 0;
    while ((m = TOKEN.exec(code)) !== null) {
      if (m[0] === "") { TOKEN.lastIndex++; continue; }
      if (m.index > last) pre.appendChild(document.createTextNode(code.slice(last, m.index)));
      cls = m[1] ? "c" : m[2] ? "s" : m[3] ? "n" :
        KW.has(m[4]) ? "k" : BUILTIN.has(m[4]) ? "b" : "";
      if (cls) pre.appendChild(el("span", cls, m[0]));
      else pre.appendChild(document.createTextNode(m[0]));
      last = TOKEN.lastIndex;
    }
    if (last < code.length) pre.appendChild(document.createTextNode(code.slice(last)));
    return pre;
  }

  function richText(text, box) {
    var last = 0, m, lang;
    FENCE.lastIndex = 0;
    function plain(part) {
      if (part.trim()) box.appendChild(el("div", "text", part.replace(/^\n+|\s+$/g, "")));
    }
    while ((m = FENCE.exec(text)) !== null) {
      plain(text.slice(last, m.index));
      lang = m[1].toLowerCase();
      if (lang === "output") box.appendChild(el("pre", "out", m[2]));
      else box.appendChild(highlight(m[2]));
      last = FENCE.lastIndex;
      if (m[0] === "") FENCE.lastIndex++;
    }
    plain(text.slice(last));
  }

  function cutNote(n) {
    return el("div", "note", "(truncated for the viewer: " + n + " characters in the original)");
  }

  function toolSegment(seg, n, prevModel) {
    var r = seg.result || {}, box = el("div", "seg tool");
    var head = el("div", "head", "tool call #" + n);
    function badge(cls, text) { head.appendChild(el("span", "badge " + cls, text)); }
    if (typeof r.duration_ms === "number") badge("", r.duration_ms.toFixed(1) + " ms");
    if (r.error) { box.classList.add("error"); badge("bad", r.error_type || "error"); }
    if (r.timed_out) { box.classList.add("timeout"); badge("warn", "timed out"); }
    if (r.truncated) badge("warn", "output truncated");
    if (r.state_lost) badge("warn", "state lost");
    if (r.crashed) badge("bad", "crashed");
    box.appendChild(head);
    if (seg.code) {
      var det = el("details", "code"), code = seg.code.trim();
      det.appendChild(el("summary", "meta", "code that ran"));
      det.appendChild(highlight(seg.code));
      det.open = !(prevModel && prevModel.indexOf(code) >= 0);
      box.appendChild(det);
      if (seg.code_cut) box.appendChild(cutNote(seg.code_cut));
    }
    if (!seg.result) { box.appendChild(el("pre", "out", seg.text)); return box; }
    if (r.stdout) box.appendChild(el("pre", "out", r.stdout));
    var hasValue = r.value !== null && r.value !== undefined && r.value !== "";
    if (hasValue) box.appendChild(el("pre", "out", "→ " + r.value));
    if (r.stderr) box.appendChild(el("pre", "out stderr", r.stderr));
    if (r.error) box.appendChild(el("pre", "err", r.error));
    if (r.timed_out && !r.error) box.appendChild(el("pre", "err", "timed out"));
    if (!r.stdout && !hasValue && !r.stderr && !r.error && !r.timed_out) {
      box.appendChild(el("div", "meta", "(no output)"));
    }
    ["stdout", "value", "stderr", "error"].forEach(function (k) {
      if (r[k + "_cut"]) box.appendChild(cutNote(r[k + "_cut"]));
    });
    return box;
  }

  function trajectory(sample) {
    var box = el("div", "card"), calls = 0, prevModel = "";
    box.id = "trajectory";
    box.appendChild(el("h2", null, "Trajectory"));
    if (!sample.has_trajectory) box.appendChild(el("div", "empty", "No trajectory recorded."));
    sample.segments.forEach(function (seg) {
      var node;
      if (seg.source === "prompt") {
        node = el("details", "seg prompt");
        node.appendChild(el("summary", null, "prompt (" + seg.n_tokens + " tokens)"));
        node.appendChild(el("div", "text", seg.text));
      } else if (seg.source === "tool") {
        node = toolSegment(seg, ++calls, prevModel);
      } else {
        node = el("div", "seg model");
        richText(seg.text || "", node);
        prevModel = seg.text || "";
      }
      if (seg.text_cut) node.appendChild(cutNote(seg.text_cut));
      box.appendChild(node);
    });
    if (sample.error) box.appendChild(el("pre", "err", "episode error: " + sample.error));
    return box;
  }

  function kv(box, label, value, cls) {
    var span = el("span");
    span.appendChild(el("b", null, label + ": "));
    span.appendChild(cls ? el("span", "badge " + cls, value)
      : document.createTextNode(show(value)));
    box.appendChild(span);
  }

  function sampleCard(sample) {
    var card = el("div", "card"), row = el("div", "kv");
    card.id = "sample-info";
    kv(row, "extracted", sample.extracted);
    kv(row, "result", sample.correct ? "correct" : "incorrect", sample.correct ? "ok" : "bad");
    kv(row, "finish", show(sample.finish_reason),
      sample.finish_reason === "answered" ? "ok" : "warn");
    kv(row, "model tokens", sample.model_tokens);
    kv(row, "tool tokens", sample.tool_tokens);
    kv(row, "prompt tokens", sample.prompt_tokens);
    kv(row, "total tokens", sample.total_tokens);
    kv(row, "tool calls", sample.tool_calls);
    kv(row, "tool errors", sample.tool_errors);
    kv(row, "timeouts", sample.tool_timeouts);
    var ms = sample.duration_ms;
    kv(row, "time", typeof ms === "number" ? (ms / 1000).toFixed(2) + " s" : null);
    card.appendChild(row);
    return card;
  }

  function problemView() {
    var main = document.getElementById("main"), run = DATA.runs[state.run];
    main.replaceChildren();
    var problem = run && run.problems[state.problem];
    if (!problem) { main.appendChild(el("div", "empty", "No problem selected.")); return; }
    var card = el("div", "card");
    card.id = "problem";
    card.appendChild(el("h2", null, problem.id));
    var meta = Object.keys(problem.meta || {}).map(function (k) {
      return k + ": " + problem.meta[k];
    });
    if (meta.length) card.appendChild(el("div", "meta", meta.join(" · ")));
    card.appendChild(el("div", "text problem-text", problem.problem));
    var gold = el("div", "kv");
    kv(gold, "gold", problem.gold);
    card.appendChild(gold);
    var buttons = el("div");
    buttons.id = "samples";
    problem.samples.forEach(function (s, i) {
      var b = el("button", s.correct ? "ok" : "bad",
        "#" + show(s.sample_index) + (s.correct ? " ✓" : " ✗"));
      if (i === state.sample) b.classList.add("active");
      b.addEventListener("click", function () { state.sample = i; update(); });
      buttons.appendChild(b);
    });
    card.appendChild(buttons);
    main.appendChild(card);
    var sample = problem.samples[state.sample];
    if (sample) { main.appendChild(sampleCard(sample)); main.appendChild(trajectory(sample)); }
  }

  function matches(problem, query, which) {
    var right = problem.samples.filter(function (s) { return s.correct; }).length;
    if (which === "wrong" && right === problem.samples.length) return false;
    if (which === "right" && right === 0) return false;
    if (!query) return true;
    return (problem.id + "\n" + (problem.problem || "")).toLowerCase().indexOf(query) >= 0;
  }

  function problemList() {
    var list = document.getElementById("plist"), run = DATA.runs[state.run];
    var query = document.getElementById("search").value.trim().toLowerCase();
    var which = document.getElementById("which").value;
    list.replaceChildren();
    if (!run) return;
    run.problems.forEach(function (p, i) {
      if (!matches(p, query, which)) return;
      var right = p.samples.filter(function (s) { return s.correct; }).length;
      var li = el("li", i === state.problem ? "active" : null);
      li.appendChild(el("span", "pid", p.id));
      var cls = right === p.samples.length ? "ok" : right ? "warn" : "bad";
      li.appendChild(el("span", "badge " + cls, right + "/" + p.samples.length));
      li.title = p.id;
      li.addEventListener("click", function () { state.problem = i; state.sample = 0; update(); });
      list.appendChild(li);
    });
  }

  function header() {
    var run = DATA.runs[state.run], box = document.getElementById("run-summary");
    if (!run) { box.textContent = "no runs"; return; }
    var c = run.config, s = run.summary;
    box.textContent = [c.model, c.backend, c.format, c.dataset].filter(function (v) { return v; })
      .concat(["k=" + show(s.k), "avg " + pct(s.avg), "maj " + pct(s.maj),
        run.problems.length + " problems"]).join(" · ");
  }

  function update() {
    header(); problemList(); problemView();
    var hash = "#r=" + state.run + "&p=" + state.problem + "&s=" + state.sample;
    try { history.replaceState(null, "", hash); }
    catch (e) { /* some browsers refuse replaceState on file: URLs */ }
  }

  function init() {
    var select = document.getElementById("run");
    DATA.runs.forEach(function (run, i) {
      select.appendChild(el("option", null, run.name)).value = String(i);
    });
    var hash = new URLSearchParams(location.hash.slice(1));
    state.run = Math.min(Math.max(0, parseInt(hash.get("r") || "0", 10) || 0),
      Math.max(0, DATA.runs.length - 1));
    state.problem = parseInt(hash.get("p") || "0", 10) || 0;
    state.sample = parseInt(hash.get("s") || "0", 10) || 0;
    select.value = String(state.run);
    select.addEventListener("change", function () {
      state.run = +select.value; state.problem = 0; state.sample = 0; update();
    });
    document.getElementById("search").addEventListener("input", problemList);
    document.getElementById("which").addEventListener("change", problemList);
    update();
  }
  init();
})();
"""

PAGE = (
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>__TITLE__</title>\n<style>" + CSS + "</style>\n</head>\n<body>\n"
    "<header><h1>__TITLE__</h1><label>run <select id=\"run\"></select></label>"
    "<span class=\"summary\" id=\"run-summary\"></span></header>\n"
    "<div id=\"wrap\"><nav id=\"side\"><div class=\"controls\">"
    "<input id=\"search\" type=\"search\" placeholder=\"search problems…\">"
    "<select id=\"which\"><option value=\"all\">all problems</option>"
    "<option value=\"wrong\">with a wrong sample</option>"
    "<option value=\"right\">with a correct sample</option></select></div>"
    "<ul id=\"plist\"></ul></nav>\n<main id=\"main\"></main></div>\n"
    "<script type=\"application/json\" id=\"viewer-data\">__DATA__</script>\n"
    "<script>" + JS + "</script>\n</body>\n</html>\n"
)
