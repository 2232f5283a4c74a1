"""Every DVC stage declares, as deps, every project module its script imports (directly or not),
and dvc.yaml's code deps are what `python -m pipelines.dvc_deps --write` makes of them.

The import graph is read statically (ast, `pipelines.dvc_deps.closure`), following every `import` /
`from ... import` of a project module (`attnflow.*`, `pipelines.*`), including imports inside
functions: a lazy import is still code the stage may run. The one exception: the method records, when
a stage reads only their facts (capture: what each method needs), count with what importing them
runs, not the code their methods call. A module is covered when its file, or a folder holding it, is a dep.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines import dvc_deps
from pipelines.dvc_deps import closure

ROOT = Path(__file__).resolve().parents[2]


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


def test_committed_dvc_yaml_is_what_the_generator_writes(monkeypatch):
    """`--check` passes, and the rewrite it computed (once: ~9 s of import closures) is the file."""
    text = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    seen = []
    real = dvc_deps.rewrite
    monkeypatch.setattr(dvc_deps, "rewrite", lambda t: seen.append(real(t)) or seen[-1])
    code = dvc_deps.main(["--check"])
    ((new, changed),) = seen
    assert not changed, f"dvc.yaml is stale for {changed}: run python -m pipelines.dvc_deps --write"
    assert new == text
    assert code == 0


@pytest.mark.slow  # the long tier: keeps the default one under 5 minutes
def test_no_code_dep_is_broader_than_the_import_closure():
    """A stage lists a module only if its script can import it (non-code deps aside)."""
    for stage, deps in _stages().items():
        files = closure(ROOT / "pipelines" / f"{stage}.py")
        for d in deps:
            if not dvc_deps.is_code_dep(d):
                continue
            if d in dvc_deps.COMPILED_SOURCES.values():  # C++ sources: the stage imports their extension
                inits = [init for init, src in dvc_deps.COMPILED_SOURCES.items() if src == d]
                assert any(ROOT / init in files for init in inits), f"{stage}: {d} is not imported"
                continue
            path = ROOT / d
            covered = {path} if path.is_file() else {f for f in files if path in f.parents}
            assert covered and covered <= files, f"{stage}: {d} is not (wholly) imported by the stage"


def test_the_flow_kernels_cpp_sources_are_deps_of_exactly_the_stages_that_import_flow():
    text = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    init = "src/attnflow/explain/_maxflow/__init__.py"
    assert dvc_deps.stages_listing("src/cpp/maxflow/tasks.hpp", text) == dvc_deps.stages_listing(init, text)
    assert dvc_deps.stages_listing("src/cpp/maxflow/tasks.hpp", text)


def test_a_generation_module_reruns_only_the_stages_that_use_generation():
    text = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    for f in ("src/attnflow/generate/result.py", "src/attnflow/generate/explanation.py"):
        assert dvc_deps.stages_listing(f, text) == [
            "generate",
            "answer",
            "report",
        ]  # answer: span attention through generate
    assert "train" not in dvc_deps.stages_listing("src/attnflow/models/smollm2.py", text)


def test_the_generator_keeps_data_deps_and_templating():
    old = [
        "pipelines/train.py",
        "src/attnflow/models",
        "${paths.prepared}/${item}",
        "src/attnflow/data/checksums.tsv",
    ]
    new = dvc_deps.stage_deps("train", old)
    assert new[-2:] == ["${paths.prepared}/${item}", "src/attnflow/data/checksums.tsv"]
    assert "src/attnflow/models" not in new and "pipelines/train.py" in new


def test_the_capture_stage_depends_on_no_solver_viz_or_display():
    """capture reads what each method needs from the records (attnflow.method_inputs) and runs no
    method, so neither the flow solver nor the figures are its code."""
    deps = _stages()["capture"]
    for path in (
        "src/attnflow/explain/flow.py",
        "src/attnflow/explain/_maxflow/__init__.py",
        "src/cpp/maxflow",
        "src/attnflow/viz/__init__.py",
        "src/attnflow/display.py",
        "src/attnflow/attnlrp/maps.py",
    ):
        assert not any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps), path
    assert "src/attnflow/method_inputs.py" in deps and "src/attnflow/methods" in deps


def test_a_facts_reader_follows_only_what_importing_runs(tmp_path):
    """Imports inside functions and under TYPE_CHECKING are code a caller may run (followed for a
    stage), not code that importing runs (what a reader of the records' facts depends on)."""
    src = tmp_path / "src" / "attnflow"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    (src / "heavy.py").write_text("")
    (src / "typed.py").write_text("")
    (src / "light.py").write_text("from attnflow import typed as t\n")
    (src / "mod.py").write_text(
        "from typing import TYPE_CHECKING\nimport attnflow.light\n"
        "if TYPE_CHECKING:\n    import attnflow.typed\n"
        "def f():\n    import attnflow.heavy\n"
    )
    mod = src / "mod.py"
    assert dvc_deps.imports(mod, tmp_path) == {
        "attnflow",
        "attnflow.light",
        "attnflow.typed",
        "attnflow.heavy",
    }
    assert dvc_deps.imports(mod, tmp_path, at_import=True) == {"attnflow", "attnflow.light"}


@pytest.mark.slow  # the long tier: keeps the default one under 5 minutes
def test_reading_the_records_facts_runs_no_method():
    """What capture does with the records (method_inputs.needed_inputs) imports no solver, AttnLRP
    or figure code; and method_inputs reads facts only (no `.function` / `.per_head` / `.generator`)."""
    import subprocess
    import sys

    text = (ROOT / "src/attnflow/method_inputs.py").read_text(encoding="utf-8")
    for attr in (".function", ".per_head", ".generator"):
        assert attr not in text, f"method_inputs reads {attr}: the capture stage would run the methods' code"
    code = (
        "import sys, pipelines.capture\n"
        "from attnflow.method_inputs import EXPLAINER_INPUTS, needed_inputs\n"
        "needed_inputs(list(EXPLAINER_INPUTS))\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('attnflow.explain.flow', 'attnflow.explain._maxflow',"
        " 'attnflow.viz', 'attnflow.display', 'attnflow.attnlrp.maps')))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
