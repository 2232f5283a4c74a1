"""Imports flow one way: a declared layer order of attnflow's modules, no import circle, no private
name imported across packages, and the config's choices are the library's own tuples.

Read statically (ast), imports inside functions included: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# Bottom to top. A module may import its own layer or any layer below it, never one above. A unit
# is a top-level module or package of attnflow; "attnflow" is the package's __init__ (its version,
# and public names imported lazily by string: it imports nothing of attnflow statically).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "attnflow",
        "options",
        "_extras",
        "io",
        "paths",
        "batches",
        "devices",
        "modes",
        "explanation_file",
        "resources",
        "lockfile",
    ),
    ("data", "metrics", "viz", "sweep", "stage_cache"),
    ("models", "display"),
    ("lrp", "tasks", "tracking"),
    ("bridge",),  # model -> tensors: below every method and every API
    ("attnlrp",),
    ("needs",),  # the model quantities a method reads: records, captured with hooks (torch, lazily)
    ("explain",),  # the method kit and the algorithms: handed records and needs, never reading the records
    ("methods", "method_inputs"),  # the method records (a name is resolved here, once) and their views
    # stream: the methods computed inside the forward (on the bridge); stream_state: their accumulators
    ("schema", "schema_types", "capture", "stream", "stream_state"),
    ("attribution", "hf", "lit"),  # the Python API (attnflow.hf) sits on the bridge
    ("generate", "compare"),
    ("report", "cli", "pronouns", "answer"),  # the report, the command line, the studies on top of the API
)
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
# Modules whose unit is not their package's (none at present).
UNITS: dict[str, str] = {}


def _modules(src: Path = SRC) -> dict[str, Path]:
    out = {}
    for f in (src / "attnflow").rglob("*.py"):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(mod: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str], int]]:
    """(imported module, names, line) of every import of a module, relative ones resolved."""
    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            out.append((base, [a.name for a in node.names], node.lineno))
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _unit(mod: str) -> str:
    if mod in UNITS:
        return UNITS[mod]
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "attnflow"


def _edges(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {imported module: line}."""
    edges: dict[str, dict[str, int]] = {m: {} for m in modules}
    for mod, path in modules.items():
        for base, names, line in _imports(mod, path, modules):
            for name in names or [None]:
                full = f"{base}.{name}" if name and f"{base}.{name}" in modules else base
                target = _resolve(full, modules)
                if target and target != mod:
                    edges[mod].setdefault(target, line)
    return edges


def _circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def upward_imports(src: Path = SRC) -> list[str]:
    modules = _modules(src)
    bad = []
    for mod, targets in _edges(modules).items():
        for target, line in targets.items():
            here, there = _unit(mod), _unit(target)
            if missing := [u for u in dict.fromkeys((here, there)) if u not in RANK]:
                bad.append(f"{modules[mod]}:{line}: {', '.join(missing)} has no place in LAYERS")
            elif RANK[there] > RANK[here]:
                bad.append(f"{modules[mod]}:{line}: {mod} imports {target}, a higher layer")
    return sorted(set(bad))


def private_imports(src: Path = SRC) -> list[str]:
    modules = _modules(src)
    bad = []
    for mod, path in modules.items():
        for base, names, line in _imports(mod, path, modules):
            hidden = [n for n in names if n.startswith("_") and not n.startswith("__")]
            target = _resolve(base, modules)
            if hidden and target and target.split(".")[:2] != mod.split(".")[:2]:
                bad.append(f"{path}:{line}: from {base} import {', '.join(hidden)}")
    return bad


def test_no_import_circle():
    assert _circles(_edges(_modules())) == []


def test_every_import_goes_to_the_same_or_a_lower_layer():
    assert upward_imports() == []


def test_no_private_name_is_imported_from_another_package():
    assert private_imports() == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "attnflow" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checks_catch_a_circle_an_upward_import_and_a_private_import(tmp_path):
    src = _tree(tmp_path, {
        "__init__.py": "",
        "options.py": "from attnflow.cli import run\n",  # upward (options is the bottom layer)
        "cli/__init__.py": "from attnflow.options import X\nfrom attnflow.hf.text import _helper\n",
        "hf/__init__.py": "",
        "hf/text.py": "def _helper(): pass\n",
    })  # fmt: skip
    modules = _modules(src)
    assert _circles(_edges(modules)) == [["attnflow.cli", "attnflow.options"]]
    assert any("options imports attnflow.cli" in b for b in upward_imports(src))
    assert private_imports(src) == [
        f"{src / 'attnflow/cli/__init__.py'}:2: from attnflow.hf.text import _helper"
    ]


def test_a_new_top_level_module_must_be_given_a_layer(tmp_path):
    src = _tree(tmp_path, {"__init__.py": "", "newthing.py": "import attnflow.options\n", "options.py": ""})
    assert any("newthing" in b and "no place in LAYERS" in b for b in upward_imports(src))


@pytest.mark.parametrize(
    ("key", "library"),
    [
        ("explain.heads", "attnflow.explain._common:HEAD_AGGREGATIONS"),
        ("task.*.rows", "attnflow.explain.rows:ROW_CHOICES"),
        ("generate.sinks", "attnflow.explain.causal:SINK_CHOICES"),
        ("generate.receptive_fields", "attnflow.explain.causal:RECEPTIVE_FIELDS"),
        ("task.*.gradient_target", "attnflow.attribution.input_gradients:TARGETS"),
        ("attribution.gradient_reduction", "attnflow.attribution.input_gradients:REDUCTIONS"),
        ("correlate.spearman", "attnflow.metrics.spearman:SPEARMAN_METHODS"),
        ("correlate.undefined", "attnflow.metrics.correlate_samples:UNDEFINED"),
        ("task.*.data.source", "attnflow.data.linzen:SOURCES"),
        ("task.*.capture.select", "attnflow.capture:SELECTIONS"),
        ("pronouns.methods", "attnflow.pronouns.study:PRONOUN_METHODS"),
        ("pronouns.reduce", "attnflow.metrics.antecedents:ANTECEDENT_REDUCTIONS"),
    ],
)
def test_the_schema_choices_are_the_library_tuples(key, library):
    """The very objects, not equal copies: a choice added to the library is a choice of the config."""
    import importlib

    from attnflow.schema import CHOICES

    module, _, name = library.partition(":")
    assert CHOICES[key] is getattr(importlib.import_module(module), name)


def test_every_schema_choice_comes_from_the_options_module_or_the_method_records():
    from attnflow import options
    from attnflow.methods import generation_methods, study_methods
    from attnflow.schema import CHOICES

    tuples = {id(v) for v in vars(options).values() if isinstance(v, tuple)}
    records = {
        "explain.methods": [r.name for r in study_methods()],
        "generate.methods": [r.name for r in generation_methods()],
    }
    for key, allowed in CHOICES.items():
        assert id(allowed) in tuples or list(allowed) == records.get(key), key


def test_the_cli_choices_are_the_library_tuples():
    from attnflow import options
    from attnflow.cli import common, generate
    from attnflow.explain import causal

    assert generate.SINK_CHOICES is causal.SINK_CHOICES is options.SINK_CHOICES
    assert generate.RECEPTIVE_FIELD_CHOICES is causal.RECEPTIVE_FIELDS
    assert common.ROW_CHOICES is options.HF_ROW_CHOICES


def test_the_options_module_imports_nothing_of_attnflow():
    path = SRC / "attnflow" / "options.py"
    assert not [b for b, _, _ in _imports("attnflow.options", path, {}) if b.startswith("attnflow")]


def test_the_method_records_and_the_config_schema_import_neither_torch_nor_the_flow_solver():
    # records hold their functions, so a method module must import heavy code inside the function
    import subprocess
    import sys

    code = (
        "import sys, attnflow.schema, attnflow.methods, attnflow.explain.kit\n"
        "heavy = sorted(m for m in ('torch', 'numba', 'transformers') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
