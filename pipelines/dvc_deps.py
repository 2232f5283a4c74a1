"""The code deps of every dvc.yaml stage: the modules its script can import, computed, not hand-kept.

A stage's code is the static import closure of ``pipelines/<stage>.py`` (ast, no import is run):
every ``import`` / ``from ... import`` of a project module (``attnflow.*``, ``pipelines.*``),
relative ones included, and imports inside functions too (a lazy import is still code the stage may
run), plus ``"attnflow.mod:name"`` strings (the method registry's lazy references). A folder is
listed instead of its files when every ``.py`` file under it is in the closure.

In dvc.yaml only the code entries of each stage's ``deps`` are rewritten (``.py`` files and folders
under ``src/`` and ``pipelines/``); data, models, outputs, other files, params and the
``foreach`` / ``${item}`` templating are kept as they are, and so are comments and layout.

    python -m pipelines.dvc_deps --check   # exit 1 (and say which stages) when dvc.yaml is stale
    python -m pipelines.dvc_deps --write   # rewrite the deps lists in dvc.yaml
    python -m pipelines.dvc_deps --who src/attnflow/generate/result.py   # stages that list a file
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DVC_YAML = ROOT / "dvc.yaml"
# "package.module:attribute", the form of lazy references resolved with importlib.
_LAZY_REF = re.compile(r"^((?:attnflow|pipelines)(?:\.\w+)*):\w+$")


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file of a project module or package (None for third-party ones)."""
    top = name.split(".")[0]
    base = root / "src" if top == "attnflow" else root if top == "pipelines" else None
    if base is None:
        return None
    path = base.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports(path: Path, root: Path = ROOT) -> set[str]:
    """Project modules named by the imports of one file (``from a import b`` yields a.b when b is a module)."""
    src = root / "src"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(src if src in path.parents else root).with_suffix("").parts)
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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            ref = _LAZY_REF.match(node.value)
            if ref:
                names.add(ref.group(1))
    found = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # a.b.c imports a and a.b too
            if module_file(".".join(parts[:i]), root) is not None:
                found.add(".".join(parts[:i]))
    return found


# attnflow.methods imports every module of its package (pkgutil): a stage that reads the records
# for what they compute or need (these modules) depends on all of them; a stage that only validates
# method names in its config (every stage, through attnflow.schema) does not.
_RECORD_PACKAGE = Path("src/attnflow/methods")
_RECORD_READERS = tuple(
    Path("src/attnflow", f)
    for f in (
        "method_inputs.py",
        "explain/registry.py",
        "explain/samples.py",  # the records' functions, per-head variants, CLS convention
        "hf/methods.py",
        "hf/text.py",
        "generate/explanation.py",
        "generate/gradient_maps.py",
        "compare/scores.py",
        "attribution/comparators.py",
        "report/inputs.py",  # the records' figure order
    )
)


def closure(script: Path, root: Path = ROOT) -> set[Path]:
    """Every project file `script` can import, directly or not (itself included)."""
    todo, seen = [script], {script}
    while todo:
        for name in imports(todo.pop(), root):
            f = module_file(name, root)
            if f is not None and f not in seen:
                seen.add(f)
                todo.append(f)
        if not todo and any(root / r in seen for r in _RECORD_READERS):
            todo = sorted(_py_files(root / _RECORD_PACKAGE) - seen)  # the discovered record modules
            seen.update(todo)
    return seen


def _py_files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*.py") if "__pycache__" not in p.parts}


def fold(files: Iterable[Path], root: Path = ROOT) -> list[str]:
    """`files` as dvc deps (paths relative to `root`), a folder in place of its files when every
    ``.py`` file under it is among them (the highest such folder below ``src/attnflow`` / ``pipelines``)."""
    files = set(files)
    tops = {root / "src" / "attnflow", root / "pipelines"}
    out: set[Path] = set()
    for f in files:
        best = f
        d = f.parent
        while d not in tops and (root / "src") in d.parents:
            if _py_files(d) <= files:
                best = d
            d = d.parent
        out.add(best)
    return sorted(p.relative_to(root).as_posix() for p in out)


def is_code_dep(dep: str, root: Path = ROOT) -> bool:
    """A dep this generator owns: a .py file or a folder under src/ or pipelines/ (no templating)."""
    if "${" in dep or not dep.startswith(("src/", "pipelines/")):
        return False
    path = root / dep
    return dep.endswith(".py") or path.is_dir() or not Path(dep).suffix


# Compiled extensions: their C++ sources are code of every stage that imports the package holding
# the extension (an import of a compiled module finds no .py file, so the closure cannot see them).
COMPILED_SOURCES = {Path("src/attnflow/explain/_maxflow/__init__.py"): "src/cpp/maxflow"}


def stage_deps(stage: str, old: list[str], root: Path = ROOT) -> list[str]:
    """The deps of `stage`: its script's import closure (folded) and the C++ sources of the
    extensions it imports, then the non-code deps of `old`."""
    files = closure(root / "pipelines" / f"{stage}.py", root)
    compiled = sorted(src for init, src in COMPILED_SOURCES.items() if root / init in files)
    return fold(files, root) + compiled + [d for d in old if not is_code_dep(d, root)]


_STAGE = re.compile(r"^  ([A-Za-z_][\w-]*):\s*$")
_DEPS = re.compile(r"^(\s+)deps:\s*$")
_ITEM = re.compile(r"^(\s+)- (.+?)\s*$")


def rewrite(text: str, root: Path = ROOT) -> tuple[str, list[str]]:
    """dvc.yaml text with every stage's deps list regenerated, and the names of the stages it changed."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    changed: list[str] = []
    stage = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _STAGE.match(line)
        if m:
            stage = m.group(1)
        d = _DEPS.match(line)
        if d is None or stage is None:
            out.append(line)
            i += 1
            continue
        out.append(line)
        i += 1
        old, indent = [], None
        while i < len(lines) and (item := _ITEM.match(lines[i])) and len(item.group(1)) > len(d.group(1)):
            indent = item.group(1)
            old.append(item.group(2))
            i += 1
        new = stage_deps(stage, old, root)
        if new != old:
            changed.append(stage)
        indent = indent or d.group(1) + "  "
        out.extend(f"{indent}- {dep}\n" for dep in new)
    return "".join(out), changed


def stages_listing(path: str, text: str) -> list[str]:
    """Stages whose deps cover `path` (the file itself or a folder holding it)."""
    import yaml

    spec = yaml.safe_load(text)
    who = []
    for name, stage in spec["stages"].items():
        deps = [str(d) for d in stage.get("do", stage).get("deps", [])]
        if any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps):
            who.append(name)
    return who


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.dvc_deps", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true", help="fail when dvc.yaml's code deps are not current")
    group.add_argument("--write", action="store_true", help="rewrite the code deps of dvc.yaml")
    group.add_argument("--who", metavar="PATH", help="the stages whose deps cover PATH")
    args = parser.parse_args(argv)
    text = DVC_YAML.read_text(encoding="utf-8")
    if args.who:
        print("\n".join(stages_listing(args.who, text)))
        return 0
    new, changed = rewrite(text)
    if args.check:
        if changed:
            print(
                f"dvc.yaml: the code deps of {', '.join(changed)} are not current; "
                "run: python -m pipelines.dvc_deps --write",
                file=sys.stderr,
            )
            return 1
        return 0
    if changed:
        DVC_YAML.write_text(new, encoding="utf-8")
        print(f"dvc.yaml: rewrote the deps of {', '.join(changed)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
