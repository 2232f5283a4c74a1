"""What the wheel's metadata and files tell an institutional user: the licence, typing, the
changelog of this version, the project's links, authors and classifiers, extras bounded to what
the code supports, and no message pointing a pip user at a file the wheel does not hold."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "attnflow"


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_licence_file_is_the_mit_licence_the_metadata_names(project):
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text


def test_the_package_is_marked_typed(project):
    assert (PACKAGE / "py.typed").is_file()  # PEP 561: inside the package, so inside the wheel
    assert "Typing :: Typed" in project["classifiers"]


def test_authors_urls_and_classifiers_are_declared(project):
    assert project["authors"] and all(a.get("name") for a in project["authors"])
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(project["urls"])
    assert all(u.startswith("https://") for u in project["urls"].values())
    assert any(c.startswith("Development Status") for c in project["classifiers"])
    versions = {
        c.rsplit(" ", 1)[-1]
        for c in project["classifiers"]
        if c.startswith("Programming Language :: Python :: 3.")
    }
    assert versions == {"3.10", "3.11", "3.12", "3.13"}  # requires-python >= 3.10, as tested by nox


def test_the_changelog_has_an_entry_for_this_version(project):
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(project['version'])}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.M)
    assert "`v<version>`" in text  # each release is the git tag v<version>


def test_the_compare_extra_bounds_ferret_to_what_the_adapter_supports(project):
    from attnflow.compare.ferret import SUPPORTED

    (ferret,) = [r for r in project["optional-dependencies"]["compare"] if r.startswith("ferret-xai")]
    assert ferret == f"ferret-xai{SUPPORTED}"


def test_no_library_message_sends_a_pip_user_to_a_file_outside_the_wheel():
    # requirements*.txt are the study's pins, in a checkout only
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in PACKAGE.rglob("*.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "requirements-compare.txt" in line
    ]
    assert offenders == []


def test_the_packaged_classifier_ships_inside_the_package():
    weights = PACKAGE / "models" / "weights" / "minilm_sst2.safetensors"
    assert weights.is_file() and weights.stat().st_size <= 5 * 1024 * 1024
