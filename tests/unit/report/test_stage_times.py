"""The stage-time table: the latest finished run of each stage@task, and the docs table written from it."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from attnflow.report.glance import with_paragraph
from attnflow.report.stage_times import MARKERS, markdown, stage_times, totals, untimed
from pipelines import stage_times as script


def run(stage, task, seconds, end, status="FINISHED", commit="c0ffee1234567890"):
    tags = {"stage": stage, "git_commit": commit, **({"dataset": task} if task else {})}
    return SimpleNamespace(
        info=SimpleNamespace(status=status, end_time=end),
        data=SimpleNamespace(tags=tags, metrics={"wall_time_s": seconds}),
    )


def test_the_latest_finished_run_of_each_stage_and_task_counts():
    runs = [
        run("explain", "sst2", 295.0, end=1),
        run("explain", "sst2", 41.24, end=5),  # the re-run
        run("explain", "sst2", 9.0, end=9, status="FAILED"),  # a failed run has no result
        run("train", "sst2", 600.0, end=2),
        run("report", "all", 12.0, end=7),  # a stage that runs once
        SimpleNamespace(  # the parent run: no stage tag
            info=SimpleNamespace(status="FINISHED", end_time=8), data=SimpleNamespace(tags={}, metrics={})
        ),
    ]
    table = stage_times(runs, order=["train", "explain", "report"])
    assert table.to_dict("records") == [
        {"stage": "train", "task": "sst2", "seconds": 600.0, "commit": "c0ffee123456"},
        {"stage": "explain", "task": "sst2", "seconds": 41.2, "commit": "c0ffee123456"},
        {"stage": "report", "task": "", "seconds": 12.0, "commit": "c0ffee123456"},
    ]
    assert totals(table) == {"training": 600.0, "non-training": 53.2}


def test_the_markdown_table_has_a_column_per_task_and_names_the_code():
    table = pd.DataFrame(
        [
            ("train", "agreement", 900.0, "aaa"),
            ("train", "sst2", 600.0, "aaa"),
            ("explain", "sst2", 41.0, "bbb"),
            ("report", "", 12.0, "bbb"),
        ],
        columns=["stage", "task", "seconds", "commit"],
    )
    text = markdown(table)
    assert "| stage | agreement | sst2 | once |" in text
    assert "| train | 15.0 min | 10.0 min |  |" in text
    assert "| explain |  | 41 s |  |" in text
    assert "| report |  |  | 12 s |" in text
    assert "Training: 25.0 min; every other stage: 53 s." in text
    assert "aaa: train; bbb: explain, report" in text


def test_a_stage_of_dvc_lock_without_a_run_is_named_under_the_table():
    table = pd.DataFrame([("train", "sst2", 600.0, "aaa"), ("report", "", 12.0, "aaa")],
                         columns=["stage", "task", "seconds", "commit"])  # fmt: skip
    lock = {"stages": {"train@agreement": {}, "train@sst2": {}, "report": {}}}
    missing = untimed(table, lock)
    assert missing == ["train@agreement"]
    text = markdown(table, missing)
    assert "Training: 10.0 min" in text
    assert (
        "No finished run of this config in the store for train@agreement (dvc.lock holds its outputs)" in text
    )
    assert "No finished run" not in markdown(table, [])


def test_no_runs_is_a_clear_error():
    with pytest.raises(ValueError, match="dvc repro"):
        markdown(stage_times([]))


def test_the_docs_table_is_the_committed_csv():
    text = script.DOC.read_text(encoding="utf-8")
    assert with_paragraph(text, script.docs_table(), script.DOC, markers=MARKERS) == text, (
        "docs/results.md: the stage-time table is stale: run python -m pipelines.stage_times"
    )
