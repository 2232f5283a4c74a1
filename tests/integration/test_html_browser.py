"""The HTML page in a real headless browser (Chromium): it renders, has no script errors, shows the
tokens, and its controls change what is shown. Skipped only where no Chromium is installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from attnflow.viz import html_page


def _find_chromium() -> str | None:
    candidates = [os.environ.get("CHROMIUM"), "/usr/bin/chromium"]
    candidates += [
        shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    ]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


CHROMIUM = _find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium not installed (apt-get install chromium): no headless browser to load the page",
)
# How long the page may run its scripts (virtual time: returns as soon as the page is idle).
VIRTUAL_TIME_MS = 5000

TOKENS = ["[CLS]", "a", "gripping", "</script>", "film", "[SEP]"]
MAPS = {
    "rollout": np.array([[0.5, 0.1, 0.2, 0.05, 0.05, 0.1], [0.3, 0.1, 0.35, 0.05, 0.1, 0.1]]),
    "flow": np.array([[0.4, 0.15, 0.15, 0.1, 0.1, 0.1], [0.2, 0.1, 0.1, 0.1, 0.4, 0.1]]),
}
ITEMS = [
    {"title": "A gripping film", "columns": TOKENS, "rows": ["L1", "L2"], "maps": MAPS, "row": 1, "method": "flow",
     "muted": [0, 5]},
    {"title": "second input", "columns": ["x", "y"], "rows": ["L1", "L2"], "maps": {"rollout": np.eye(2)}},
]  # fmt: skip

# Runs after the page's own script: drives the controls like a reader, records what is shown.
PROBE = """
<script>
(function () {
  function shown() {
    return Array.prototype.map.call(document.querySelectorAll("#tokens .tok"), function (s) {
      return {text: s.textContent, score: Number(s.dataset.score), bg: s.style.backgroundColor, muted: s.classList.contains("muted")};
    });
  }
  var log = {initial: {method: document.body.dataset.method, row: document.body.dataset.row, tokens: shown()}};
  var method = document.getElementById("method"), row = document.getElementById("row");
  method.value = "rollout"; method.dispatchEvent(new Event("change"));
  row.value = "0"; row.dispatchEvent(new Event("change"));
  log.changed = {method: document.body.dataset.method, row: document.body.dataset.row, tokens: shown()};
  document.querySelectorAll("#grid tr")[2].dispatchEvent(new Event("click"));  // header row, then L1, L2
  log.clicked = {row: document.body.dataset.row, selected: document.getElementById("row").value};
  var item = document.getElementById("item");
  item.value = "1"; item.dispatchEvent(new Event("change"));
  log.second = {tokens: shown().map(function (t) { return t.text; }), methods: method.options.length};
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(log);
  document.body.appendChild(pre);
})();
</script>
"""


class _Dom(HTMLParser):
    """The body's attributes and the text of <pre id="probe"> in a dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.body: dict[str, str | None] = {}
        self.probe = ""
        self.tokens: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "pre" and a.get("id") == "probe":
            self._in = "probe"
        elif tag == "span" and "tok" in (a.get("class") or "").split():
            self._in = "tok"
            self.tokens.append("")

    def handle_endtag(self, tag):
        if tag in ("pre", "span"):
            self._in = None

    def handle_data(self, data):
        if self._in == "probe":
            self.probe += data
        elif self._in == "tok":
            self.tokens[-1] += data


def _alpha(css: str) -> float:
    """The opacity of a computed CSS colour: rgb(r, g, b) -> 1, rgba(r, g, b, a) -> a."""
    parts = css[css.index("(") + 1 : -1].split(",")
    return float(parts[3]) if len(parts) == 4 else 1.0


def _load(page: str, tmp_path: Path, fragment: str = "") -> tuple[_Dom, list[str]]:
    """Open the page in headless Chromium; (the parsed DOM after its scripts ran, console messages)."""
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    cmd = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr", "--v=0", f"--virtual-time-budget={VIRTUAL_TIME_MS}", "--dump-dom", path.as_uri() + fragment,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return dom, console


def test_the_page_renders_the_tokens_without_script_errors(tmp_path):
    dom, console = _load(html_page(ITEMS, title="attnflow"), tmp_path)
    assert console == []
    assert dom.body.get("data-ready") == "1" and "data-error" not in dom.body
    assert dom.tokens == TOKENS  # including "</script>", shown as text
    assert dom.body.get("data-method") == "flow" and dom.body.get("data-row") == "1"


def test_the_controls_switch_method_layer_and_input(tmp_path):
    page = html_page(ITEMS, title="attnflow").replace("</body>", PROBE + "</body>")
    dom, console = _load(page, tmp_path)
    assert console == [] and "data-error" not in dom.body
    log = json.loads(dom.probe)
    first = log["initial"]["tokens"]
    np.testing.assert_allclose([t["score"] for t in first], MAPS["flow"][1], atol=1e-9)
    # special tokens are muted; "film" (0.4) is the darkest of the others
    assert [t["muted"] for t in first] == [True, False, False, False, False, True]
    # the colour rule (attnflow.viz.scale): shaded tokens 0.1, 0.1, 0.1, 0.4 (n = 4, total 0.7); the
    # 0.1s hold 1/7 < 1/4, the uniform share: white; film holds 4/7: log(16/7) / log 4 = 0.596
    alphas = [_alpha(t["bg"]) for t in first[1:5]]
    assert alphas[:3] == [0.0, 0.0, 0.0] and alphas[3] == pytest.approx(np.log(16 / 7) / np.log(4), abs=1e-3)
    changed = log["changed"]
    assert (changed["method"], changed["row"]) == ("rollout", "0")
    np.testing.assert_allclose([t["score"] for t in changed["tokens"]], MAPS["rollout"][0], atol=1e-9)
    assert log["clicked"] == {"row": "1", "selected": "1"}
    assert log["second"] == {"tokens": ["x", "y"], "methods": 1}


def test_a_link_can_choose_input_method_and_layer(tmp_path):
    dom, console = _load(html_page(ITEMS), tmp_path, "#item=1&method=rollout&row=0")
    assert console == [] and dom.body.get("data-ready") == "1"
    assert (dom.body.get("data-item"), dom.body.get("data-method"), dom.body.get("data-row")) == (
        "0",
        "rollout",
        "0",
    )


def test_a_broken_page_is_caught(tmp_path):
    """The checks above are not vacuous: a script error shows in the DOM and in the console."""
    page = html_page(ITEMS).replace('id="data">{', 'id="data">{oops')
    dom, console = _load(page, tmp_path)
    assert "data-ready" not in dom.body
    assert dom.body.get("data-error")
    assert any("Uncaught" in line for line in console)


def test_a_uniform_layer_is_drawn_white_in_the_browser_not_as_maximal(tmp_path):
    # the issue: 6.4-6.8 % per token was drawn solid dark red (each layer shaded relative to its max)
    n = 15
    row = np.full(n, 1 / n)
    row[3] += 0.004
    row /= row.sum()
    item = {"title": "flat", "columns": [f"t{j}" for j in range(n)], "rows": ["L1"], "maps": {"flow": [row]}}
    dom, console = _load(html_page([item]), tmp_path)
    assert console == [] and dom.body.get("data-ready") == "1"
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "uniform share 1/n" in page
    probe = html_page([item]).replace("</body>", PROBE_ALPHA + "</body>")
    dom, _ = _load(probe, tmp_path)
    alphas = json.loads(dom.probe)
    assert len(alphas) == n and max(alphas) < 0.05  # nearly white, every token


# Records the opacity of every token's shading after the page rendered.
PROBE_ALPHA = """
<script>
(function () {
  var a = Array.prototype.map.call(document.querySelectorAll("#tokens .tok"), function (s) {
    var c = s.style.backgroundColor, p = c.slice(c.indexOf("(") + 1, -1).split(",");
    return p.length === 4 ? Number(p[3]) : 1;
  });
  var pre = document.createElement("pre"); pre.id = "probe"; pre.textContent = JSON.stringify(a);
  document.body.appendChild(pre);
})();
</script>
"""
