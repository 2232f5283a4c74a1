"""The self-contained HTML page (inline CSS, data and JS; no external resources), and `script_json`,
the only way data is embedded in it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.io import write_bytes
from attnflow.viz.png import _BLUE, _RGB

# Scores are rounded to this many decimals in the HTML page (keeps 1,000-input pages small).
HTML_DECIMALS = 5


_CSS = """
:root { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; }
body { margin: 1.5rem auto; max-width: 70rem; padding: 0 1rem; }
h1 { font-size: 1.3rem; margin: 0 0 .3rem; }
.sub { color: #555; margin: 0 0 1rem; }
.controls { display: flex; flex-wrap: wrap; gap: 1rem; align-items: center; margin: .8rem 0;
            padding: .6rem .8rem; background: #f6f6f6; border-radius: 6px; }
.controls label { font-size: .9rem; }
select { font-size: .9rem; padding: .15rem .3rem; }
#tokens { line-height: 2.4; font-size: 1.15rem; margin: 1rem 0; }
.tok { padding: .2rem .25rem; margin: 0 .08rem; border-radius: 4px; border: 1px solid #ddd;
       white-space: pre; cursor: default; }
.tok.sel { outline: 2px solid #1f77b4; }
#legend { display: flex; align-items: center; gap: .5rem; font-size: .8rem; color: #555; }
#legend .ramp { width: 10rem; height: .8rem; border: 1px solid #ccc;
  background: linear-gradient(to right, rgba(RGB,0), rgba(RGB,1)); }
table.grid { border-collapse: collapse; font-size: .72rem; margin-top: .6rem; }
table.grid th { font-weight: normal; color: #444; padding: 0 .25rem; }
table.grid th.col { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
                    max-height: 8rem; white-space: nowrap; }
table.grid td { min-width: 2rem; height: 1.5rem; border: 1px solid #fff; text-align: center;
                font-variant-numeric: tabular-nums; color: #333; }
table.grid td.muted, .tok.muted { background: #e4e4e4 !important; color: #555 !important; }
.tok.muted { border-style: dashed; }
table.grid tr.sel th.rowlab { font-weight: bold; color: #1f77b4; }
table.grid tr { cursor: pointer; }
#error { display: none; color: #a00; background: #fee; padding: .5rem; border-radius: 4px; }
.hint { color: #777; font-size: .8rem; }
""".replace("RGB", ",".join(map(str, _RGB)))

_JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("data").textContent);
  var RGB = DATA.rgb.join(",");
  var $ = function (id) { return document.getElementById(id); };
  var state = { item: 0, method: null, row: 0 };

  function fill(select, values, labels, chosen) {
    select.textContent = "";
    values.forEach(function (v, i) {
      var o = document.createElement("option");
      o.value = String(v); o.textContent = labels ? labels[i] : String(v);
      if (v === chosen) { o.selected = true; }
      select.appendChild(o);
    });
  }
  var BLUE = DATA.blue.join(",");
  // the colour rule of every attnflow picture (attnflow.viz.scale.uniform_shade): a token's share
  // s = |v| / R of the reference mass R (the method's strongest row, special tokens left out)
  // against the uniform share 1/n, log(n s) / log(n) clipped to [0, 1]; one R for every row
  function reference(item, mat) {
    var r = 0;
    mat.forEach(function (row) {
      var m = 0;
      row.forEach(function (v, j) { if (!isMuted(item, j) && isFinite(v)) { m += Math.abs(v); } });
      r = Math.max(r, m);
    });
    return r;
  }
  function shades(item, row, ref) {
    var n = 0;
    row.forEach(function (v, j) { if (!isMuted(item, j)) { n += 1; } });
    return row.map(function (v, j) {
      if (isMuted(item, j) || !(ref > 0) || !isFinite(v)) { return 0; }
      var s = Math.abs(v) / ref;
      var a = n <= 1 ? Math.min(s, 1) : Math.max(0, Math.min(1, Math.log(n * s) / Math.log(n)));
      return v < 0 ? -a : a;
    });
  }
  // the number of a cell (attnflow.viz.scale.row_percent): signed % of the row's total |score|
  function rowPercent(row) {
    var total = 0;
    row.forEach(function (v) { if (isFinite(v)) { total += Math.abs(v); } });
    return row.map(function (v) { return total > 0 && isFinite(v) ? 100 * v / total : 0; });
  }
  function shade(a) {
    return "rgba(" + (a < 0 ? BLUE : RGB) + "," + Math.abs(a).toFixed(3) + ")";
  }
  function ink(a) { return Math.abs(a) > 0.6 ? "#fff" : "#222"; }

  // percent: whole from 100, one decimal from 1, two significant digits below (a long input's
  // cells are ~0.1 % each: "0.098" and "0.31" differ where "0.1" and "0.3" would hide it)
  function cell(p) {
    var a = Math.abs(p);
    return a >= 99.95 ? p.toFixed(0) : a >= 0.995 || a === 0 ? p.toFixed(1) : p.toPrecision(2);
  }
  function pct(p) { return cell(p) + "%"; }
  function isMuted(item, j) { return $("mute").checked && (item.muted || []).indexOf(j) >= 0; }
  function shadedCount(item) {
    var n = 0;
    item.columns.forEach(function (_, j) { if (!isMuted(item, j)) { n += 1; } });
    return n;
  }

  function render() {
    var item = DATA.items[state.item];
    var mat = item.maps[state.method];
    var values = mat[state.row];
    var ref = reference(item, mat);
    var alpha = shades(item, values, ref);
    var percent = rowPercent(values);
    $("title").textContent = item.title;
    $("subtitle").textContent = item.subtitle || "";
    var box = $("tokens"); box.textContent = "";
    item.columns.forEach(function (tok, j) {
      var s = document.createElement("span");
      s.className = isMuted(item, j) ? "tok muted" : "tok"; s.textContent = tok;
      s.style.backgroundColor = shade(alpha[j]);
      s.style.color = ink(alpha[j]);
      s.title = tok + ": " + pct(percent[j]);
      s.dataset.score = String(values[j]);
      box.appendChild(s); box.appendChild(document.createTextNode(" "));
    });
    $("n").textContent = String(shadedCount(item));
    // the whole matrix: every row of this method, each shaded by the same rule
    var table = $("grid"); table.textContent = "";
    var head = document.createElement("tr");
    head.appendChild(document.createElement("th"));
    item.columns.forEach(function (tok) {
      var th = document.createElement("th"); th.className = "col"; th.textContent = tok; head.appendChild(th);
    });
    table.appendChild(head);
    mat.forEach(function (row, i) {
      var tr = document.createElement("tr");
      if (i === state.row) { tr.className = "sel"; }
      var th = document.createElement("th"); th.className = "rowlab"; th.textContent = item.rows[i];
      tr.appendChild(th);
      var rowAlpha = shades(item, row, ref);
      var rowPct = rowPercent(row);
      row.forEach(function (v, j) {
        var td = document.createElement("td");
        if (isMuted(item, j)) { td.className = "muted"; }
        td.style.backgroundColor = shade(rowAlpha[j]);
        td.style.color = ink(rowAlpha[j]);
        td.textContent = cell(rowPct[j]);
        td.title = item.rows[i] + " / " + item.columns[j] + ": " + pct(rowPct[j]);
        tr.appendChild(td);
      });
      tr.addEventListener("click", function () { state.row = i; $("row").value = String(i); render(); });
      table.appendChild(tr);
    });
    document.body.dataset.method = state.method;
    document.body.dataset.row = String(state.row);
    document.body.dataset.item = String(state.item);
    reportHeight();
  }
  // in a notebook's frame: tell the frame how tall the page is (attnflow.display sizes it)
  function reportHeight() {
    if (window.parent !== window) {
      window.parent.postMessage({attnflowHeight: document.documentElement.scrollHeight}, "*");
    }
  }
  window.addEventListener("message", function (m) { if (m.data === "attnflow-height") { reportHeight(); } });

  function selectItem(k) {
    var item = DATA.items[k];
    state.item = k;
    var methods = Object.keys(item.maps);
    if (methods.indexOf(state.method) < 0) {
      state.method = methods.indexOf(item.method) >= 0 ? item.method : methods[0];
    }
    state.row = Math.min(item.row === undefined ? item.rows.length - 1 : item.row, item.rows.length - 1);
    fill($("method"), methods, null, state.method);
    fill($("row"), item.rows.map(function (_, i) { return i; }), item.rows, state.row);
    render();
  }

  var items = DATA.items.map(function (_, k) { return k; });
  fill($("item"), items, DATA.items.map(function (it, k) { return (k + 1) + ". " + it.title; }), 0);
  if (DATA.items.length < 2) { $("item-box").style.display = "none"; }
  $("item").addEventListener("change", function (e) { selectItem(Number(e.target.value)); });
  $("method").addEventListener("change", function (e) { state.method = e.target.value; render(); });
  $("row").addEventListener("change", function (e) { state.row = Number(e.target.value); render(); });
  $("mute").addEventListener("change", render);
  if (!DATA.items.some(function (it) { return (it.muted || []).length; })) { $("mute-box").style.display = "none"; }
  // a link can choose what is shown: page.html#item=2&method=rollout&row=0 (item 1-based, row 0-based)
  // Each value only selects from the page's own lists: a name no list holds (a malformed escape,
  // "constructor", "__proto__") leaves the default view.
  var want = Object.create(null);
  location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
    var p = kv.split("=");
    if (p.length === 2) { try { want[p[0]] = decodeURIComponent(p[1]); } catch (e) { /* not a value */ } }
  });
  var k0 = Number(want.item) - 1;
  selectItem(Number.isInteger(k0) && k0 >= 0 && k0 < DATA.items.length ? k0 : 0);
  var cur = DATA.items[state.item];
  if (Object.keys(cur.maps).indexOf(want.method) >= 0) { state.method = want.method; $("method").value = want.method; }
  var r0 = Number(want.row);
  if (want.row !== undefined && Number.isInteger(r0) && r0 >= 0 && r0 < cur.rows.length) { state.row = r0; $("row").value = String(r0); }
  render();
  document.body.dataset.ready = "1";
})();
"""


# Characters escaped in JSON embedded in a <script> block. "<" covers "</script" (which would end the
# block) and "<!--" / "<script" (which put the HTML parser in its double-escaped state, where the
# block's "</script>" no longer ends it and the page stays blank); ">" and "&" for "-->", "]]>" and
# character references; U+2028 / U+2029 end a line in older JavaScript parsers.
_SCRIPT_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(data: Any) -> str:
    """JSON that is safe to put inside a ``<script>`` block, whatever strings `data` holds.

    The only way this module embeds data in HTML: every writer of a page goes through it.

    >>> print(script_json({"t": "</script><!--"}))
    {"t":"\\u003c/script\\u003e\\u003c!--"}
    """
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.translate(str.maketrans(_SCRIPT_ESCAPES))


def _round_nested(x: Any) -> Any:
    arr = np.asarray(x, dtype=np.float64)
    arr = np.where(np.isfinite(arr), arr, 0.0)
    return np.round(arr, HTML_DECIMALS).tolist()


def html_page(
    items: Sequence[Mapping[str, Any]],
    *,
    title: str = "attnflow",
    row_name: str = "layer",
    note: str = "",
) -> str:
    """A self-contained HTML page (inline CSS, data and JS; no external resources).

    Each item is one input (see the module docstring); the page shows its tokens shaded by the
    chosen method's scores in the chosen row, and the whole [row x token] matrix (click a row to
    pick it). A link can choose the view: ``page.html#item=2&method=rollout&row=0`` (item
    1-based, row 0-based). Script errors are shown on the page and recorded in
    ``body[data-error]``; ``body[data-ready="1"]`` says the page rendered.
    """
    if not items:
        raise ValueError("no items to show")
    clean = []
    for k, item in enumerate(items):
        columns = [str(c) for c in item["columns"]]
        rows = [str(r) for r in item["rows"]]
        maps = {}
        for m, v in item["maps"].items():
            arr = np.asarray(v, dtype=np.float64)
            if arr.shape != (len(rows), len(columns)):
                raise ValueError(
                    f"item {k}: map {m!r} has shape {arr.shape}, expected ({len(rows)}, {len(columns)})"
                )
            maps[str(m)] = _round_nested(arr)
        if not maps:
            raise ValueError(f"item {k} has no maps")
        entry = {
            "title": str(item.get("title", f"input {k + 1}")),
            "columns": columns,
            "rows": rows,
            "maps": maps,
        }
        if item.get("muted"):
            entry["muted"] = [int(j) for j in item["muted"] if 0 <= int(j) < len(columns)]
        for key in ("subtitle", "method"):
            if item.get(key) is not None:
                entry[key] = str(item[key])
        if item.get("row") is not None:
            row = int(item["row"])
            entry["row"] = row % len(rows) if rows else 0
        clean.append(entry)
    data = {"rgb": list(_RGB), "blue": list(_BLUE), "items": clean}
    payload = script_json(data)
    esc = html.escape
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{esc(title)}</title>
<style>{_CSS}</style>
<script>
window.addEventListener("error", function (e) {{
  var box = document.getElementById("error");
  var msg = (e && e.message) || "script error";
  if (document.body) {{ document.body.dataset.error = msg; }}
  if (box) {{ box.style.display = "block"; box.textContent = "This page failed to render: " + msg; }}
}});
</script>
</head>
<body>
<div id="error"></div>
<h1 id="title">{esc(title)}</h1>
<p class="sub" id="subtitle"></p>
<div class="controls">
  <label id="item-box">input <select id="item"></select></label>
  <label>method <select id="method"></select></label>
  <label>{esc(row_name)} <select id="row"></select></label>
  <label id="mute-box"><input type="checkbox" id="mute" checked> leave special tokens out of the shading</label>
  <span id="legend"><span>≤ 1/n</span> <span class="ramp"></span> <span>all on one token (n = <span id="n"></span>)</span></span>
</div>
<div id="tokens"></div>
<p class="hint">Colour: each token's share of the method's strongest {esc(row_name)} (its total over
the n shaded tokens) against the uniform share 1/n, one scale for every {esc(row_name)}: white at 1/n
or less, full colour when one token holds it all (log scale; red for positive scores, blue for
negative ones), so a uniform {esc(row_name)}, or one holding almost nothing, is white. Hover for values.
Below: every {esc(row_name)}, each score in % of its {esc(row_name)}'s total (of its total |score| when
scores are signed), one decimal (click a {esc(row_name)} to choose it).
{esc(note)}</p>
<table class="grid" id="grid"></table>
<script type="application/json" id="data">{payload}</script>
<script>{_JS}</script>
</body>
</html>
"""


def write_html(path: str | Path, items: Sequence[Mapping[str, Any]], **kwargs: Any) -> Path:
    """Write `html_page(items, **kwargs)` to `path` (atomically)."""
    return write_bytes(path, html_page(items, **kwargs))
