"""One commit behind every number: a stage that ran at an earlier commit counts as the checkout's code
when the code files it declares did not change since (attnflow.report.stage_times.with_code)."""

from __future__ import annotations

import subprocess

import pandas as pd

from attnflow.report.stage_times import SAME_CODE, markdown, with_code
from attnflow.sweep import changed_since


def _git(root, *args):
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _repo(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "train.py").write_text("a = 1\n")
    (tmp_path / "report.py").write_text("b = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    first = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "report.py").write_text("b = 2\n")
    _git(tmp_path, "commit", "-qam", "second")
    return first, _git(tmp_path, "rev-parse", "HEAD")


def test_changed_since_names_the_files_that_differ(tmp_path):
    first, _ = _repo(tmp_path)
    assert changed_since(tmp_path, first, ["train.py"]) == []
    assert changed_since(tmp_path, first[:12], ["train.py", "report.py"]) == ["report.py"]
    assert changed_since(tmp_path, first + "+dirty", ["report.py"]) == ["report.py"]
    assert changed_since(tmp_path, "0" * 40, ["train.py"]) is None  # unknown commit: cannot tell


def test_a_stage_of_unchanged_code_is_the_checkouts_and_the_table_says_so(tmp_path):
    first, second = _repo(tmp_path)
    deps = {"train": ["train.py"], "capture": ["report.py"], "report": ["report.py"]}.get
    table = pd.DataFrame({
        "stage": ["train", "capture", "report"], "task": ["agreement", "agreement", ""],
        "seconds": [10.0, 2.0, 1.0], "commit": [first[:12], first[:12], second[:12]],
    })  # fmt: skip
    got = with_code(table, tmp_path, deps, second)
    assert got["code"].tolist() == [SAME_CODE, "changed: report.py", SAME_CODE]
    assert "capture@agreement (changed: report.py)" in markdown(got)
    same = with_code(table.iloc[[0, 2]], tmp_path, deps, second)
    assert f"The declared code of every stage is that of {second[:12]}" in markdown(same)


def test_the_provenance_section_names_every_stage_and_whether_one_commit_stands_behind_them():
    from attnflow.report.document import render_markdown
    from attnflow.report.sections.provenance import stage_blocks

    table = pd.DataFrame({
        "stage": ["train", "capture"], "task": ["agreement", ""], "seconds": [1.0, 1.0],
        "commit": ["aaa", "bbb"], "code": [SAME_CODE, SAME_CODE],
    })  # fmt: skip
    text = render_markdown(stage_blocks(table, "bbb"))
    assert (
        "Every stage of this run has the code of bbb" in text and "| train | agreement | aaa | same |" in text
    )
    text = render_markdown(stage_blocks(table.assign(code=[SAME_CODE, "changed: x.py"]), "bbb"))
    assert "differs from this checkout (bbb):** capture@once" in text


def test_a_run_of_uncommitted_changes_is_the_checkouts_code_when_dvc_lock_recorded_the_same_files(tmp_path):
    # the stage ran on a dirty tree at `first` (its files then were those committed later): git cannot
    # say what ran, dvc.lock can: the md5 of each declared file at the run
    from attnflow.lockfile import lock_md5

    first, second = _repo(tmp_path)
    deps = {"train": ["train.py"], "capture": ["report.py"]}.get
    table = pd.DataFrame({
        "stage": ["train", "capture", "capture"], "task": ["a", "a", "b"], "seconds": [1.0, 1.0, 1.0],
        "commit": [first[:12] + "+dirty"] * 3,
    })  # fmt: skip

    def ran(md5):
        return {"deps": [{"path": next(iter(md5)), "md5": next(iter(md5.values()))}]}

    lock = {"stages": {
        "train@a": ran({"train.py": lock_md5(tmp_path / "train.py")}),
        "capture@a": ran({"report.py": lock_md5(tmp_path / "report.py")}),  # the checkout's report.py
        "capture@b": ran({"report.py": "0" * 32}),  # another report.py than the checkout's
    }}  # fmt: skip
    got = with_code(table, tmp_path, deps, second, lock=lock)
    assert got["code"].tolist() == [SAME_CODE, SAME_CODE, "changed: report.py"]
    # without the lock, git compares the commit the dirty run started from
    assert (
        with_code(table, tmp_path, deps, second)["code"].tolist() == [SAME_CODE] + ["changed: report.py"] * 2
    )


def test_the_commit_column_keeps_dirty():
    from types import SimpleNamespace

    from attnflow.report.stage_times import stage_times

    run = SimpleNamespace(info=SimpleNamespace(status="FINISHED", end_time=1),
                          data=SimpleNamespace(tags={"stage": "train", "dataset": "a", "git_commit": "9b0268fb45aa84a2+dirty"},
                                               metrics={"wall_time_s": 1.0}))  # fmt: skip
    assert stage_times([run])["commit"].tolist() == ["9b0268fb45aa+dirty"]


def test_the_report_names_its_own_run_not_the_one_before_it():
    from attnflow.report.stage_times import with_this_run

    table = pd.DataFrame({
        "stage": ["train", "report"], "task": ["a", ""], "seconds": [1.0, 2.0],
        "commit": ["aaa", "bbb+dirty"], "code": [SAME_CODE, "changed: report.py"],
    })  # fmt: skip
    got = with_this_run(table, "report", {"commit": "c" * 40, "dirty": False})
    assert got[["stage", "commit", "code"]].values.tolist() == [
        ["train", "aaa", SAME_CODE], ["report", "c" * 12, SAME_CODE]
    ]  # fmt: skip
    dirty = with_this_run(table, "report", {"commit": "d" * 40, "dirty": True})
    assert dirty["commit"].tolist() == ["aaa", "d" * 12 + "+dirty"]
