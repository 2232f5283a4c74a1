"""What is built and how it installs: the platform classifiers name the wheels actually built (a
compiled extension is not "OS Independent"), cibuildwheel builds Linux, macOS and Windows wheels for
every Python the classifiers name, each extra installs alone (a nox session and an example per
extra), [compare] brings [hf] and floors ferret's import path at numpy-2 releases, and the docs
workflow installs the package before it builds strictly."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
EXTRAS = PROJECT["optional-dependencies"]
# What `import ferret` (ferret-xai 0.4.1, whose requirements have no bounds) imports, and the
# first release of each with numpy 2 wheels: an older one fails on import next to numpy 2.
FERRET_IMPORT_FLOORS = {"shap": (0, 46), "numba": (0, 60), "spacy": (3, 8), "thinc": (8, 3),
                        "opencv-python": (4, 10), "datasets": (2, 19)}  # fmt: skip


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def _floor(requirement: str) -> tuple[int, ...] | None:
    found = re.search(r">=\s*([0-9.]+)", requirement)
    return tuple(int(x) for x in found.group(1).split(".")) if found else None


def _python_classifiers() -> set[str]:
    return {c.rsplit(" ", 1)[-1] for c in PROJECT["classifiers"] if re.fullmatch(r".*Python :: 3\.\d+", c)}


def test_a_compiled_package_names_the_platforms_of_its_built_wheels_not_os_independent():
    systems = {c for c in PROJECT["classifiers"] if c.startswith("Operating System ::")}
    assert "Operating System :: OS Independent" not in systems
    assert systems == {"Operating System :: POSIX :: Linux"}  # the wheels built and tested so far


def test_cibuildwheel_builds_every_classified_python_on_linux_macos_and_windows():
    cibw = PYPROJECT["tool"]["cibuildwheel"]
    built = set(re.findall(r"cp3(\d+)-\*", cibw["build"]))
    assert {f"3.{v}" for v in built} == _python_classifiers() == {"3.10", "3.11", "3.12", "3.13"}
    assert {"linux", "macos", "windows"} <= set(cibw)
    assert "{project}/tests/" in cibw["test-command"]  # each wheel is tested after it is built
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "wheels.yml").read_text())
    steps = [s.get("uses", "") for s in workflow["jobs"]["wheels"]["steps"]]
    assert any(u.startswith("pypa/cibuildwheel@") for u in steps)
    oses = workflow["jobs"]["wheels"]["strategy"]["matrix"]["os"]
    assert {o.split("-")[0] for o in oses} == {"ubuntu", "macos", "windows"}


def test_compare_installs_alone_with_hf_and_numpy2_floors_on_ferrets_import_path():
    compare = EXTRAS["compare"]
    assert "attnflow[hf]" in compare  # pip then cannot pick ferret-xai 0.4.2 (transformers<5, numpy<2)
    floors = {_name(r): _floor(r) for r in compare}
    for name, floor in FERRET_IMPORT_FLOORS.items():
        assert floors.get(name) is not None and floors[name] >= floor, (name, floors.get(name))


def test_every_user_extra_has_an_alone_nox_session_and_an_example():
    noxfile = (ROOT / "noxfile.py").read_text()
    (listed,) = re.findall(r"^ALONE = (\[.*?\])$", noxfile, flags=re.M)
    alone = ast.literal_eval(listed)
    assert set(alone) == set(EXTRAS) - {"docs", "test"}
    for extra in alone:
        example = ROOT / "tests" / "extras" / f"{extra}.py"
        assert example.is_file() and 'if __name__ == "__main__":' in example.read_text(), extra


def test_the_docs_workflow_installs_the_package_then_builds_strictly():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "docs.yml").read_text())
    runs = [s.get("run", "") for s in workflow["jobs"]["build"]["steps"]]
    install = next(i for i, r in enumerate(runs) if r.startswith("pip install"))
    build = next(i for i, r in enumerate(runs) if "mkdocs build --strict" in r)
    assert '".[docs]"' in runs[install] and install < build  # the hooks import attnflow
    assert any("broken_links" in r for r in runs[build + 1 :])  # the site navigates from disk
