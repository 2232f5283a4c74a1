"""Reliability round 4 (issue 34), the pictures: user text is drawn as plain text, never parsed.

Input text holding ``$...$`` (a price, LaTeX) once crashed the PNG with matplotlib's mathtext
``ParseFatalException``; and since the PNG came first, one such line in a 1,000-line ``--file`` lost
every output. Every text artist made from a user string (title, token tick labels, row labels,
method names) is plain text: ``parse_math=False`` and ``usetex=False``, whatever ``rcParams`` say.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from attnflow.viz import heatmap_figure, write_png

# Each breaks matplotlib's mathtext parser (or, with usetex, LaTeX) when the text is parsed as math.
MATH = ["$5 and $10", r"$\frac{1$", "$x^$", r"\$", "a $ b $ c ^ _ { } \\", "$$", r"$\undefinedmacro$"]


def _texts(fig) -> list:
    return [t for t in fig.findobj(lambda a: hasattr(a, "get_parse_math"))]


def _draw(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


@pytest.mark.parametrize("text", MATH)
def test_dollar_text_in_tokens_title_rows_and_methods_is_drawn_as_plain_text(text):
    columns = ["[CLS]", text, "ok", "[SEP]"]
    fig = heatmap_figure(
        {text: np.full((2, 4), 0.25)},
        columns=columns,
        rows=[f"L1 {text}", "L2"],
        title=f"“{text}”\n{text}",
        row_name=f"layer {text}",
        column_name=f"token {text}",
    )
    assert _draw(fig).startswith(b"\x89PNG")
    shown = [t.get_text() for t in _texts(fig)]
    assert any(text in s for s in shown)  # the user's text is there, verbatim (not math-rendered)
    for t in _texts(fig):
        if text in t.get_text():
            assert t.get_parse_math() is False and t.get_usetex() is False


def test_plain_text_holds_even_with_usetex_on_in_rcparams(tmp_path):
    """A notebook that set ``text.usetex`` (no LaTeX installed here) still gets its PNG of user text."""
    import matplotlib

    with matplotlib.rc_context({"text.usetex": True}):
        fig = heatmap_figure({"flow": np.eye(2)}, columns=["$5", "$x^$"], rows=["L1", "L2"], title="$\\frac{")
        for t in _texts(fig):
            if "$" in t.get_text():
                assert t.get_usetex() is False


def test_write_png_of_a_dollar_text_writes_the_file(tmp_path):
    path = write_png(
        tmp_path / "x.png", {"flow": np.eye(2)}, columns=["$5", "$10"], rows=["L1", "L2"], title="$x^$"
    )
    assert path.read_bytes().startswith(b"\x89PNG")


def test_notebook_plot_and_show_of_a_dollar_text():
    from attnflow.hf import Explanation

    e = Explanation(
        tokens=["[CLS]", "$5", "$x^$", "[SEP]"],
        maps={"flow": np.full((2, 4), 0.25)},
        layer=1,
        row=0,
        text="it costs $5 and $x^$",
        label="$pos$",
        meta={"special": [0, 3]},
    )
    assert _draw(e.plot()).startswith(b"\x89PNG")
    assert _draw(e.show()).startswith(b"\x89PNG")  # outside IPython: the figure comes back


# -- the HTML page's link fragment selects only from the page's own lists ------------------------------

# A stand-in DOM for the page's script under node: every element takes any property or call; the
# data block, location.hash and body.dataset are real. Prints {"error", "dataset"} as JSON.
_NODE_DOM = r"""
const fs = require("fs");
const [data, script, hash] = JSON.parse(fs.readFileSync(0, "utf8"));
function fake(name) {
  const store = {};
  const target = function () { return fake(name + "()"); };
  return new Proxy(target, {
    get(t, p) {
      if (p === "__store") return store;
      if (p === Symbol.toPrimitive) return () => "";
      if (p in store) return store[p];
      if (p === "textContent" || p === "value") return "";
      store[p] = fake(name + "." + String(p));
      return store[p];
    },
    set(t, p, v) { store[p] = v; return true; },
  });
}
const elements = {};
const document = fake("document");
document.getElementById = (id) => {
  if (!(id in elements)) { elements[id] = fake("#" + id); if (id === "mute") { elements[id].checked = true; } }
  if (id === "data") { elements[id].textContent = data; }
  return elements[id];
};
document.body = fake("body");
let error = null;
try {
  new Function("document", "window", "location", script)(document, fake("window"), { hash: hash });
} catch (e) { error = String(e); }
const ds = document.body.dataset.__store, out = {};
for (const k of Object.keys(ds)) { out[k] = typeof ds[k] === "string" ? ds[k] : null; }
console.log(JSON.stringify({ error: error, dataset: out }));
"""


def _open_page(page: str, fragment: str) -> dict:
    """The page's script run under node with `fragment` as location.hash: {"error", "dataset"}."""
    import json
    import re
    import shutil
    import subprocess

    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("node not installed: no JavaScript engine to run the page's script")
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    script = re.findall(r"<script>(.*?)</script>", page, re.S)[-1]
    proc = subprocess.run(
        [node, "-e", _NODE_DOM],
        input=json.dumps([data, script, fragment]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _page() -> str:
    from attnflow.viz import html_page

    maps = {"flow": np.eye(2, 3), "rollout": np.full((2, 3), 1 / 3)}
    return html_page(
        [{"title": "t", "columns": ["a", "b", "c"], "rows": ["L1", "L2"], "maps": maps, "method": "flow"}]
    )


def test_a_link_still_chooses_a_method_and_row_of_the_page():
    got = _open_page(_page(), "#method=rollout&row=0")
    assert got["error"] is None and got["dataset"]["ready"] == "1"
    assert (got["dataset"]["method"], got["dataset"]["row"]) == ("rollout", "0")


@pytest.mark.parametrize(
    "fragment",
    [
        "#method=constructor",
        "#method=__proto__",
        "#method=toString",
        "#method=hasOwnProperty&row=0",
        "#__proto__=1&method=valueOf",
        "#method=%E0%A4%A",  # a malformed escape: decodeURIComponent throws
        "#item=%zz&row=%",
        "#row=constructor&item=__proto__",
        "#row=1e400&item=-0",
        "#row=0.5",  # not a row's index
        "#item=1.5&method=rollout",
    ],
)
def test_a_link_naming_something_not_on_the_page_shows_the_default_view(fragment):
    """``explain.html#method=constructor`` rendered blank: the fragment's method was looked up on
    the maps object, where every object's inherited names live too."""
    got = _open_page(_page(), fragment)
    assert got["error"] is None, got
    assert got["dataset"]["ready"] == "1" and got["dataset"]["method"] in ("flow", "rollout")
