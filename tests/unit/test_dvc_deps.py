"""Every DVC stage declares, as deps, every project module its script imports (directly or not),
and dvc.yaml's code deps are what `python -m pipelines.dvc_deps --write` makes of them.

The import graph is read statically (ast, `pipelines.dvc_deps.closure`), following every `import` /
`from ... import` of a project module (`attnflow.*`, `pipelines.*`), including imports inside
functions: a lazy import is still code the stage may run. A module is covered when its file, or a
folder holding it, is a dep.
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


def test_committed_dvc_yaml_is_what_the_generator_writes():
    text = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    new, changed = dvc_deps.rewrite(text)
    assert not changed, f"dvc.yaml is stale for {changed}: run python -m pipelines.dvc_deps --write"
    assert new == text
    assert dvc_deps.main(["--check"]) == 0


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
        assert dvc_deps.stages_listing(f, text) == ["generate", "report"]
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
