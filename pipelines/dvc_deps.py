"""The code deps of every dvc.yaml stage: the modules its script can import, computed, not hand-kept.

A stage's code is the static import closure of ``pipelines/<stage>.py`` (ast, no import is run):
every ``import`` / ``from ... import`` of a project module (``attnflow.*``, ``pipelines.*``),
relative ones included, and imports inside functions too (a lazy import is still code the stage may
run), plus ``"attnflow.mod:name"`` strings (lazy references). One exception, the method records:
a stage that reads only their facts (what each method needs) depends on what importing them runs,
not on the code their methods call (see `closure`). A folder is listed instead of its files when
every ``.py`` file under it is in the closure.

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


def imports(path: Path, root: Path = ROOT, *, at_import: bool = False) -> set[str]:
    """Project modules named by the imports of one file (``from a import b`` yields a.b when b is a module).

    at_import: only the imports that importing the file runs (module and class level), not those
    inside functions, under ``if TYPE_CHECKING:`` or named by lazy-reference strings."""
    src = root / "src"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(src if src in path.parents else root).with_suffix("").parts)
    if path.name == "__init__.py":
        package = package.removesuffix(".__init__")
    else:
        package = package.rpartition(".")[0]
    names: set[str] = set()
    for node in _import_time_nodes(tree) if at_import else ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
        elif not at_import and isinstance(node, ast.Constant) and isinstance(node.value, str):
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


def _import_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """The nodes importing a module runs: all but function bodies and ``if TYPE_CHECKING:`` blocks."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue  # its body runs when called, not when the module is imported
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


# attnflow.methods imports every module of its package (pkgutil): a stage that reads the records
# for what they compute (these modules) depends on all of them, the methods' code included; a
# stage that only validates method names in its config (every stage, through attnflow.schema) does not.
_RECORD_PACKAGE = Path("src/attnflow/methods")
_RECORD_READERS = tuple(
    Path("src/attnflow", f)
    for f in (
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
# A stage that reads only the records' facts (what each method needs: the capture stage, through
# attnflow.method_inputs) runs no method: a record's facts are set when its module is imported (its
# needs are declared by the kit when its function is made), so the stage depends on what importing
# the record modules runs (their module-level imports, followed the same way), not on the code the
# methods call (the flow solver, AttnLRP). tests/unit/test_dvc_deps.py checks that it never calls one.
_RECORD_FACT_READERS = (Path("src/attnflow/method_inputs.py"),)


def closure(script: Path, root: Path = ROOT) -> set[Path]:
    """Every project file `script` can import, directly or not (itself included); modules reached
    only through the records' facts (`_RECORD_FACT_READERS`) with what importing them runs."""
    full, light = {script}, set()  # followed with every import | with the imports run at import
    todo: list[tuple[Path, bool]] = [(script, False)]
    records = sorted(_py_files(root / _RECORD_PACKAGE))
    while todo:
        f, at_import = todo.pop()
        for name in imports(f, root, at_import=at_import):
            g = module_file(name, root)
            if g is None or g in full or (at_import and g in light):
                continue
            if at_import:
                light.add(g)
            else:  # a module first reached through the records' facts is now followed fully
                full.add(g)
                light.discard(g)
            todo.append((g, at_import))
        if todo:
            continue
        # the discovered record modules: with every import where a stage reads what they compute
        readers = any(root / r in full for r in _RECORD_READERS)
        facts = any(root / r in full | light for r in _RECORD_FACT_READERS + _RECORD_READERS)
        for g in records:
            if readers and g not in full:
                full.add(g)
                light.discard(g)
                todo.append((g, False))
            elif facts and g not in full | light:
                light.add(g)
                todo.append((g, True))
    return full | light


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
