"""The README's two commands: CI runs the test one verbatim; the library snippet prints what it shows."""

from __future__ import annotations

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
