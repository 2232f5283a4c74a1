"""The house's shape (issue 58): no module of the package over 500 lines; benchmarks/ and scripts/
together at most a tenth of src/; no private name of attnflow imported outside tests/ (a private
module ``attnflow.x._y`` or a name ``_z``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 500
MAX_SIDE_SHARE = 0.10  # benchmarks/ + scripts/ against src/
OUTSIDE_TESTS = ("pipelines", "benchmarks", "scripts", "notebooks", "hydra_plugins", "docs")


def _lines(folder: str) -> int:
    return sum(len(f.read_text(encoding="utf-8").splitlines()) for f in (ROOT / folder).rglob("*.py"))


def test_no_module_of_the_package_is_over_500_lines():
    long = {
        str(f.relative_to(ROOT)): n
        for f in (ROOT / "src").rglob("*.py")
        if (n := len(f.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_benchmarks_and_scripts_are_at_most_a_tenth_of_the_package():
    side, src = _lines("benchmarks") + _lines("scripts"), _lines("src")
    assert side <= MAX_SIDE_SHARE * src, (
        f"benchmarks/ + scripts/: {side} lines, {side / src:.1%} of src/ ({src})"
    )


def private_imports(path: Path) -> list[str]:
    """``file:line: name`` of each import of a private attnflow module or name in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "attnflow":
            names = [*node.module.split(".")[1:], *(a.name for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [
                p for a in node.names if a.name.split(".")[0] == "attnflow" for p in a.name.split(".")[1:]
            ]
        else:
            continue
        found += [f"{path}:{node.lineno}: {n}" for n in names if n.startswith("_") and not n.startswith("__")]
    return found


def test_the_private_import_finder_finds_both_kinds(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "from attnflow.data._lines import X\nfrom attnflow.io import _plain, read_json\nimport attnflow.a._b\n"
    )
    assert [line.split(": ")[1] for line in private_imports(f)] == ["_lines", "_plain", "_b"]


@pytest.mark.parametrize("folder", OUTSIDE_TESTS)
def test_no_private_attnflow_name_is_imported_outside_tests(folder):
    found = [hit for f in sorted((ROOT / folder).rglob("*.py")) for hit in private_imports(f)]
    assert not found, "\n".join(found)
