"""Every DVC stage declares, as deps, every project module its script imports (directly or not).

The import graph is read statically (ast), following every `import` / `from ... import` of a
project module (`attnflow.*`, `pipelines.*`), including imports inside functions: a lazy import is
still code the stage may run. A module is covered when its file, or a folder holding it, is a dep.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def _module_file(name: str) -> Path | None:
    """The file of a project module or package (None for third-party ones)."""
    top = name.split(".")[0]
    base = SRC if top == "attnflow" else ROOT if top == "pipelines" else None
    if base is None:
        return None
    path = base.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path) -> set[str]:
    """Project modules named by the imports of one file (``from a import b`` yields a.b when b is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(SRC if SRC in path.parents else ROOT).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.removesuffix(".__init__")
    else:
        package = package.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    found = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a.b.c imports a and a.b too
            if _module_file(".".join(parts[:i])) is not None:
                found.add(".".join(parts[:i]))
    return found


def closure(script: Path) -> set[Path]:
    todo, seen = [script], {script}
    while todo:
        for name in _imports(todo.pop()):
            f = _module_file(name)
            if f is not None and f not in seen:
                seen.add(f)
                todo.append(f)
    return seen


def _stages() -> dict[str, list[str]]:
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    out = {}
    for name, stage in spec["stages"].items():
        body = stage.get("do", stage)
        out[name] = [str(d) for d in body["deps"]]
    return out


@pytest.mark.parametrize("stage", sorted(_stages()))
def test_stage_declares_the_modules_it_imports(stage):
    deps = [ROOT / d for d in _stages()[stage] if "${" not in d]
    script = ROOT / "pipelines" / f"{stage}.py"
    assert script in deps, f"{stage}: its own script is not a dep"
    uncovered = sorted(
        f.relative_to(ROOT).as_posix()
        for f in closure(script)
        if not any(f == d or d in f.parents for d in deps)
    )
    assert not uncovered, f"dvc.yaml stage {stage!r} imports modules it does not declare: {uncovered}"


def test_closure_follows_lazy_and_relative_imports():
    files = {f.relative_to(ROOT).as_posix() for f in closure(ROOT / "pipelines" / "report.py")}
    assert "src/attnflow/report/sections/maps.py" in files  # relative, through sections/__init__
    assert "src/attnflow/metrics/accuracy.py" in files  # imported by a section
