"""The report names the code behind each table and never pools seeds run by other code: they are
left out of every seed table and named (report.allow_mixed_code pools them, saying so)."""

from __future__ import annotations

import json

from attnflow.report import build_report
from tests.unit.report.conftest import correlations, study_paths

MAIN = {"commit": "a" * 40, "dirty": False, "code": {"src": "s1", "pipelines": "p1", "conf": "c1"}}


def _sweep(root, job_code):
    """A finished seed-sweep job (seed 1) whose provenance is ``job_code``."""
    paths = study_paths(root)
    paths.sweep.parent.mkdir(parents=True)
    correlations("agreement").assign(seed=1, job="0").to_csv(paths.sweep, index=False)
    job = {
        "job": "0",
        "seed": 1,
        "overrides": "seed=1",
        "recipe": "",
        "status": "finished",
        "provenance": job_code,
    }
    paths.sweep_jobs.write_text(json.dumps({"jobs": [job], "failed": [], "seeds": [1]}))
    return paths


def _build(root, *, allow=False):
    config = {"seed": 0, "report": {"examples": [], "n_examples": 0, "allow_mixed_code": allow}}
    return build_report(tasks=["agreement"], paths=study_paths(root), config=config, code=MAIN)


def test_a_sweep_of_other_code_is_left_out_naming_the_folder_and_the_job(tmp_path, make_stage_outputs):
    make_stage_outputs(tmp_path, tasks=("agreement",))
    other = {**MAIN, "commit": "b" * 40, "dirty": True, "code": {**MAIN["code"], "pipelines": "p2"}}
    _sweep(tmp_path, other)
    md = _build(tmp_path).markdown
    section = md.split("## Provenance", 1)[1]
    assert "**Seeds 1 are left out of every seed table:**" in section
    assert (
        "pipelines/: this run (aaaaaaaaaaaa) differs from sweep job 0 (seed 1) (bbbbbbbbbbbb+dirty)"
        in section
    )
    assert (
        f"| Seeds (left out: other code) | sweep job 0 (seed 1) | {'b' * 12} (uncommitted changes) |"
        in section
    )
    assert "## Seeds" not in md  # nothing pooled: seed 0 alone has no seed table
    md = _build(tmp_path, allow=True).markdown  # told to: pooled, and said so
    section = md.split("## Provenance", 1)[1]
    assert "**Mixed code" in section and "pipelines/" in section and "left out" not in section
    assert f"| {'a' * 12} |" in section and f"| {'b' * 12} (uncommitted changes) |" in section
    assert "## Seeds" in md


def test_a_job_without_a_record_is_left_out(tmp_path, make_stage_outputs):
    make_stage_outputs(tmp_path, tasks=("agreement",))
    _sweep(tmp_path, None)  # the sweeps before provenance was recorded
    md = _build(tmp_path).markdown
    assert "no record of the code" in md.split("## Provenance", 1)[1]
    assert "## Seeds" not in md


def test_same_code_under_another_commit_is_pooled_and_both_commits_named(tmp_path, make_stage_outputs):
    make_stage_outputs(tmp_path, tasks=("agreement",))
    _sweep(tmp_path, {**MAIN, "commit": "c" * 40})  # a later commit that changed only docs
    md = _build(tmp_path).markdown
    section = md.split("## Provenance", 1)[1]
    assert "Mixed code" not in section
    assert f"| Tables 1-3 and every per-task section | this run | {'a' * 12} |" in section
    assert f"| Seeds (pooled) | sweep job 0 (seed 1) | {'c' * 12} |" in section
    assert "## Seeds" in md


def test_trainings_taken_from_the_stage_cache_are_named_with_the_commit_that_ran_them(
    tmp_path, make_stage_outputs
):
    make_stage_outputs(tmp_path, tasks=("agreement",))
    paths = _sweep(tmp_path, MAIN)
    jobs = json.loads(paths.sweep_jobs.read_text())
    taken = {"key": "k", "reused": True, "trained_by": "c" * 40}
    jobs["jobs"][0]["training"] = {"agreement": taken, "sst2": {**taken, "reused": False}}
    paths.sweep_jobs.write_text(json.dumps(jobs))
    section = _build(tmp_path).markdown.split("## Provenance", 1)[1]
    assert "stage cache (a run of the same training code files, data, params and machine" in section
    assert f"sweep job 0 (seed 1): agreement trained by {'c' * 12}." in section
    jobs["jobs"][0]["training"] = {"agreement": {**taken, "reused": False}}
    paths.sweep_jobs.write_text(json.dumps(jobs))
    assert "stage cache" not in _build(tmp_path).markdown  # trained by the job itself: nothing to say
