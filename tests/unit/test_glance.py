"""README's "at a glance" paragraph is written from the committed results (python -m pipelines.glance)."""

from __future__ import annotations

import re

import pytest

from attnflow.paths import StudyPaths
from attnflow.report import glance
from pipelines import _config

ROOT = _config.ROOT


@pytest.fixture(scope="module")
def facts():
    cfg = _config.load(ROOT / _config.PARAMS)
    allow = bool(cfg.report.allow_mixed_code)
    paths = StudyPaths.from_config(cfg.paths, root=ROOT)
    return glance.facts(paths, int(cfg.seed), glance.report_code(paths, ROOT), allow_mixed_code=allow)


def test_the_readme_paragraph_is_the_committed_results(facts):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert glance.with_paragraph(text, glance.paragraph(facts), ROOT / "README.md") == text, (
        "README.md: the at-a-glance paragraph is stale: run python -m pipelines.glance"
    )


def test_the_cells_within_the_tolerance_are_the_reports_count(facts):
    # one fact in one place: the README's count is the one the report's claims section prints
    report = (ROOT / "reports" / "report.md").read_text(encoding="utf-8")
    n_in, n_all = map(int, re.search(r"within ±0\.10 of the paper: (\d+) of (\d+)", report).groups())
    assert (facts["within"], facts["cells"]) == (n_in, n_all)
    assert f"{n_in} of the {n_all} rollout and flow cells" in " ".join(glance.paragraph(facts).split())


def test_a_changed_result_makes_the_paragraph_stale(facts):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    changed = {**facts, "within": facts["within"] - 1}
    assert glance.with_paragraph(text, glance.paragraph(changed), ROOT / "README.md") != text


def test_missing_markers_are_named():
    with pytest.raises(ValueError, match=r"README\.md: the markers <!-- results:glance -->"):
        glance.with_paragraph("no markers here", "x", ROOT / "README.md")
