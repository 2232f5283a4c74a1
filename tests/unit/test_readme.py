"""The README's two commands: CI runs the test one verbatim; the library snippet prints what it shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)


def test_ci_runs_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    test_command = _bash_blocks()[1]
    assert test_command in ci_lines
    assert test_command.endswith("&& python -m pytest")  # the default tier, as the README says


def test_readme_library_snippet_prints_what_it_shows(capsys):
    """The ```python block runs, and every printed line equals the comment lines shown under it."""
    (code,) = re.findall(r"```python\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    exec(compile(code, "README.md", "exec"), {})
    printed = [ln.strip() for ln in capsys.readouterr().out.splitlines()]
    shown = []
    for line in code.splitlines():
        if line.startswith("# ") and not line.startswith("# one input") and not line.startswith("# a padded"):
            shown.append(line[2:].strip())
        elif "print(maps.shape)" in line:
            shown.append(line.split("#")[1].strip())
    assert printed == shown


def test_the_library_comes_right_after_the_two_commands_and_its_example_runs_offline():
    """Within the first 40 lines: the docs link, one install line with the CPU-only torch line,
    the 5-line example (run here on the packaged SST-2 classifier: a real prediction, explained by
    rollout, flow and the class-specific Chefer and AttnLRP), one CLI line and the picture it
    makes; no link into ../shared."""
    import numpy as np
    from PIL import Image

    text = (ROOT / "README.md").read_text()
    head = "\n".join(text.splitlines()[:40])
    (example,) = re.findall(r"```py\n(.*?)\n```", head, flags=re.S)
    assert len(example.splitlines()) == 5
    # not on PyPI yet: the install lines that work today (a checkout, a built wheel), and where releases come from
    assert 'pip install ".[hf,minilm]"' in head and "\nprints a token table" in head
    assert re.search(r'pip install "dist/attnflow-[^"]+\.whl\[hf,minilm\]"', head) and "PyPI" in head
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in head
    assert "https://attnflow.github.io/attnflow/" in "\n".join(
        text.splitlines()[:8]
    )  # the docs, near the top
    (cli,) = re.findall(r"`(attnflow explain [^`]*)`", head)
    (picture,) = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", head)
    assert max(Image.open(ROOT / picture).size) <= 4000
    assert "--out" in cli and "](../shared" not in text
    scope: dict = {}
    exec(compile(example, "README.md", "exec"), scope)
    e = scope["e"]
    assert e.tokens[0] == "[CLS]" and list(e.maps) == ["rollout", "flow", "chefer", "attnlrp"]
    assert e.label == "negative" and "e.label: 'negative'" in example  # a real prediction, as shown
    assert len(e.to_pandas()) == 4 * e.num_layers * len(e.tokens)
    np.testing.assert_allclose(e.maps["flow"].sum(-1), 1.0, atol=1e-6)
    assert "minilm-sst2" in cli and "chefer,attnlrp" in cli


def _benchmark_tables():
    import importlib.util

    spec = importlib.util.spec_from_file_location("benchmark_tables", ROOT / "benchmarks" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_performance_tables_are_the_committed_benchmark_results():
    """README.md and docs/performance.md show what benchmarks/results/ holds (python benchmarks/tables.py)."""
    tables = _benchmark_tables()
    rendered = tables.rendered()
    for path, names in tables.DOCUMENTS.items():
        text = path.read_text(encoding="utf-8")
        mine = {name: rendered[name] for name in names}
        assert tables.with_tables(text, mine, path) == text, f"{path}: run python benchmarks/tables.py"
    result = json.loads((ROOT / "benchmarks" / "results" / "flow_speed.json").read_text(encoding="utf-8"))
    first = result["rows"][0]
    assert f"| {first['figure']} | {tables._num(first['ours'])} {first['unit']} |" in rendered["flow"]


def test_a_document_without_its_table_markers_is_named(tmp_path):
    import pytest

    tables = _benchmark_tables()
    with pytest.raises(ValueError, match=r"notes\.md: the markers of table 'flow' appear 0 times"):
        tables.with_tables("no markers here", {"flow": "| x |"}, tmp_path / "notes.md")
    twice = "<!-- benchmarks:flow -->\nold\n<!-- /benchmarks:flow -->\n" * 2
    with pytest.raises(ValueError, match="appear 2 times"):
        tables.with_tables(twice, {"flow": "| x |"}, tmp_path / "notes.md")
