"""Install-and-test sessions: the built wheel in a fresh virtual environment, per Python version.

    nox                  # base-3.10 ... base-3.13 and hf-3.11 (the default sessions)
    nox -s base-3.12     # one session; nox -l lists them all
    nox -t slow          # hf-cuda-3.10/3.12/3.13: multi-GB CUDA torch downloads, see below
    nox -t alone         # alone-hf, alone-minilm, alone-compare, alone-lm, alone-study: each extra
                         # installed ALONE from the wheel into a fresh venv, running its example
    ATTNFLOW_WHEEL=dist/attnflow-0.1.0-cp311-cp311-linux_x86_64.whl nox -s alone-compare  # reuse a wheel

The sessions install from whatever index pip is configured with (pip.conf, PIP_* variables), so
they run offline against a local index or wheelhouse. nox finds each interpreter as pythonX.Y on
PATH; with pyenv, make them all visible first, e.g.
`PYENV_VERSION=3.11.7:3.10.13:3.12.1:3.13.0 nox` (`pyenv versions` lists what is installed).

The wheel is built once per nox run, from an sdist (`python -m build`), which also checks that the
sdist holds everything the wheel needs. attnflow has a compiled part (attention flow's max-flow
kernels, C++17 via scikit-build-core + pybind11), so the wheel is version-specific: each Python
version's session builds its own (pip fetches cmake and ninja where the system has none; a C++17
compiler must be on PATH). Tests run against the installed wheel, not src/: pytest's
pythonpath is the repository root, and src/ is never put on sys.path.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
DIST = ROOT / ".nox" / "_dist"
PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
# The CPU torch wheel of this project's machines exists for 3.11 only; on any other version pip
# resolves torch to the CUDA build from PyPI (several GB with its nvidia-* wheels).
CPU_TORCH_PYTHON = "3.11"

# Library tests that need only the base (numpy, scipy, tqdm, the compiled kernels) + the [test] extra: explain
# and metrics on numpy arrays, the hypothesis properties vs the networkx oracle. Left out because
# they import torch at module level: tests/unit/explain/test_explain_graph.py,
# test_explain_invariants.py, test_explain_validation.py, test_relevance.py and
# test_relevance_fixture.py (+ safetensors, attnflow.lrp); pandas at module level:
# tests/unit/metrics/test_metrics_agreement.py, test_metrics_switches.py (attnflow.metrics.tables).
# Torch-only cases inside the listed files skip themselves (pytest.importorskip).
BASE_TESTS = [
    "tests/property",
    "tests/unit/explain/test_causal.py",
    "tests/unit/explain/test_explain_hand_cases.py",
    "tests/unit/explain/test_explain_maxflow.py",
    "tests/unit/explain/test_explain_speedpaths.py",
    "tests/unit/explain/test_flow_compiled.py",
    "tests/unit/explain/test_flow_progress.py",
    "tests/unit/metrics/test_metrics_correlate_samples.py",
    "tests/unit/metrics/test_metrics_faithfulness.py",
    "tests/unit/metrics/test_metrics_spearman.py",
    "tests/unit/metrics/test_metrics_summarize.py",
    "tests/unit/test_packaging.py",
]
# The hf API on tiny random models built offline (no downloads): every architecture family
# (decoder classifiers included), the notebook view, and the README's 5-line example on the
# packaged MiniLM ([minilm]).
HF_TESTS = [
    "tests/unit/test_hf_adapter.py",
    "tests/unit/test_hf_families.py",
    "tests/unit/test_display.py",
    "tests/unit/test_readme.py::test_the_library_comes_right_after_the_two_commands_and_its_example_runs_offline",
    "tests/unit/models/test_minilm_sst2.py",  # the packaged classifier: its weights are in the wheel
    "tests/unit/test_viz_scale.py",
]

_built: dict[str, Path] = {}


def _wheel(session: nox.Session) -> Path:
    """The attnflow wheel for this session's Python (sdist, then a wheel built from it), built on
    the first call of this nox run for that version and reused by later sessions.

    ``ATTNFLOW_WHEEL=<path>`` uses a wheel built before (one build for several nox runs), when its
    tag is this session's Python. The build folder is .nox/_build/<tag>, not the checkout's build/
    of `pip install -e .`."""
    version = session.python if isinstance(session.python, str) else "default"
    given = os.environ.get("ATTNFLOW_WHEEL")
    if given and f"-cp{version.replace('.', '')}-" in Path(given).name:
        return Path(given).resolve()
    if version not in _built:
        out = DIST / version
        shutil.rmtree(out, ignore_errors=True)
        session.install("build")
        build_dir = ROOT / ".nox" / "_build" / "{wheel_tag}"
        session.run("python", "-m", "build", "--outdir", str(out), f"-Cbuild-dir={build_dir}", str(ROOT))
        (wheel,) = out.glob("attnflow-*.whl")
        _built[version] = wheel
    return _built[version]


def _pin(name: str) -> str:
    """The exact pin of `name` in requirements.txt (the study's versions), e.g. 'torch==2.13.0'."""
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.split("==")[0].strip() == name:
            return line.strip()
    raise ValueError(f"{name} is not pinned in requirements.txt")


def _pytest(session: nox.Session, paths: list[str]) -> None:
    # Import the wheel's attnflow from a folder without src/ on the path; -p no:cacheprovider keeps
    # the checkout free of a .pytest_cache written by another interpreter.
    session.run("python", "-c", "import attnflow, sys; print(attnflow.__file__, sys.version)")
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths, *session.posargs)


@nox.session(python=PYTHONS)
def base(session: nox.Session) -> None:
    """The base install (numpy, scipy, tqdm, the compiled flow kernels; no torch, no numba): import
    it, check the first flow call is compiled code, run the library tests."""
    wheel = _wheel(session)
    session.install(f"{wheel}[test]")
    session.run(
        "python", "-c", "import attnflow.explain, attnflow.metrics, attnflow.explain._maxflow._kernels"
    )
    # numba and llvmlite must not have come in with the base: the kernels are compiled into the wheel
    session.run(
        "python",
        "-c",
        "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) for m in ('numba', 'llvmlite')))",
    )
    # torch must not have come in with the base.
    session.run("python", "-c", "import importlib.util as u, sys; sys.exit(u.find_spec('torch') is not None)")
    _pytest(session, BASE_TESTS)


@nox.session(python=[CPU_TORCH_PYTHON])
def hf(session: nox.Session) -> None:
    """The wheel with [hf] on 3.11, on the CPU torch wheel of requirements.txt (venv ~1.6 GB)."""
    wheel = _wheel(session)
    # The pin keeps pip on the local CPU build: torch's newest release on PyPI is the CUDA one.
    session.install(f"{wheel}[hf,minilm,test]", _pin("torch"))
    _pytest(session, HF_TESTS)


@nox.session(
    name="hf-cuda", python=[p for p in PYTHONS if p != CPU_TORCH_PYTHON], default=False, tags=["slow"]
)
def hf_cuda(session: nox.Session) -> None:
    """[hf] on the other versions: SLOW, pip downloads the CUDA torch build (several GB per venv)."""
    wheel = _wheel(session)
    session.install(f"{wheel}[hf,minilm,test]")
    _pytest(session, HF_TESTS)


# [compare] brings [hf]: pip resolves ferret-xai 0.4.1 (0.4.2 pins transformers<5), whose
# ferret.explainers.BaseExplainer the adapter extends; the compare tests run captum and ferret
# (alone-compare below installs [compare] by itself and runs its example).
COMPARE_TESTS = ["tests/unit/compare"]


@nox.session(python=[CPU_TORCH_PYTHON])
def compare(session: nox.Session) -> None:
    """The wheel with [compare] (which brings [hf]) and the test extra on 3.11: the compare tests."""
    wheel = _wheel(session)
    session.install(f"{wheel}[hf,minilm,compare,test]", _pin("torch"))
    session.run(
        "python", "-c", "from importlib.metadata import version; print('ferret-xai', version('ferret-xai'))"
    )
    _pytest(session, COMPARE_TESTS)


@nox.session(python=[CPU_TORCH_PYTHON])
def docs(session: nox.Session) -> None:
    """The [docs] extra builds the site strictly (every API page, the equations, the links)."""
    session.install(f"{_wheel(session)}[docs]")
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / ".nox" / "_site"))


# Each extra installed alone (`pip install "attnflow[<extra>]"` and nothing else) into a fresh
# venv from the built wheel, then its example, tests/extras/<extra>.py, run from outside the
# checkout's src/. What each needs and shows: [hf] a tiny random BERT explained as a table, a
# picture and by the CLI; [minilm] the README's example on the packaged classifier; [compare]
# captum IG and ferret's Benchmark with attnflow's tables (this is what was broken: [compare]
# alone resolved ferret-xai 0.4.2 with transformers 4 and numpy 1, and `import ferret` failed);
# [lm] generation rollout on a tiny Llama; [study] the MLflow store rebuilt from reports/.
ALONE = ["hf", "minilm", "compare", "lm", "study"]


def _alone(extra: str):
    def session_fn(session: nox.Session) -> None:
        wheel = _wheel(session)
        started = time.monotonic()
        # The torch pin keeps pip on the CPU build of this machine's index (PyPI's newest torch is the
        # CUDA one, several GB); every other requirement comes from the extra alone.
        session.install(f"{wheel}[{extra}]", _pin("torch"))
        installed = time.monotonic() - started
        session.run("python", "-m", "pip", "check")
        session.run("python", str(ROOT / "tests" / "extras" / f"{extra}.py"), *session.posargs)
        session.log(
            f"[{extra}] install {installed:.0f} s, example {time.monotonic() - started - installed:.0f} s"
        )

    session_fn.__doc__ = (
        f"The wheel with [{extra}] alone in a fresh venv on {CPU_TORCH_PYTHON}: tests/extras/{extra}.py."
    )
    return nox.session(name=f"alone-{extra}", python=[CPU_TORCH_PYTHON], tags=["alone"], default=False)(
        session_fn
    )


for _extra in ALONE:
    _alone(_extra)
