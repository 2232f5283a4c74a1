"""Reliability round 5 (issue 57): an SQLite MLflow store that cannot be one is named in one line, at once.

A damaged (not SQLite), locked, newer-schema or folder-shaped ``mlflow.db`` ended the stage with a
SQLAlchemy traceback that named no file, the folder after 109 s of MLflow's retries. Now
`attnflow.tracking.runs.probe` (called by every stage run and by the sweep before MLflow opens the
store) checks the file first: TrackingUnavailable, which the stages print as one line.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

pytest.importorskip("mlflow")

from attnflow import tracking
from attnflow.tracking.runs import SQLITE_MAGIC, TrackingUnavailable, check_sqlite_store, probe

FAST_S = 2.0  # every refusal here comes well within this (MLflow's own took 5 to 109 s)


def _uri(path) -> str:
    return f"sqlite:///{path}"


def _refused(path, *, lock_wait_s: float = 3.0) -> str:
    """The one-line message of the refusal of the store at `path`, checked to come fast."""
    started = time.monotonic()
    with pytest.raises(TrackingUnavailable) as info:
        check_sqlite_store(_uri(path), lock_wait_s=lock_wait_s)
    assert time.monotonic() - started < FAST_S + lock_wait_s
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"MLflow store {path} "), message
    return message


def _store(path, revision: str | None) -> None:
    """An SQLite file with MLflow's alembic_version table at `revision` (no table: None)."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE experiments (id INTEGER)")
    if revision is not None:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        db.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    db.commit()
    db.close()


def test_a_folder_is_refused_at_once_naming_it(tmp_path):
    (tmp_path / "mlflow.db").mkdir()
    assert "a folder, not an SQLite database file" in _refused(tmp_path / "mlflow.db")


def test_a_file_that_is_not_sqlite_is_refused_naming_it(tmp_path):
    path = tmp_path / "mlflow.db"
    path.write_bytes(b"this is not a database\n" * 20)
    message = _refused(path)
    assert "not an SQLite database (damaged, or another kind of file" in message and "this is" in message


def test_a_truncated_database_is_refused(tmp_path):
    path = tmp_path / "mlflow.db"
    path.write_bytes(SQLITE_MAGIC + b"\x10\x00")
    assert "a truncated SQLite database (18 bytes)" in _refused(path)


def test_a_damaged_database_past_its_header_is_refused(tmp_path):
    path = tmp_path / "mlflow.db"
    _store(path, "x")
    data = bytearray(path.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)  # the schema page overwritten
    path.write_bytes(bytes(data))
    assert "a damaged SQLite database (database disk image is malformed)" in _refused(path)


def test_a_store_locked_by_another_writer_is_refused_after_a_bounded_wait(tmp_path):
    path = tmp_path / "mlflow.db"
    _store(path, None)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        message = _refused(path, lock_wait_s=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "locked by another process for over 0.2 s" in message
    check_sqlite_store(_uri(path), lock_wait_s=0.2)  # the lock gone: fine


def test_a_schema_newer_than_this_mlflow_is_refused_naming_the_versions(tmp_path):
    import mlflow

    path = tmp_path / "mlflow.db"
    _store(path, "ffffffffffff")
    message = _refused(path)
    assert f"schema version ffffffffffff is unknown to MLflow {mlflow.__version__}" in message
    assert "a newer MLflow wrote it" in message


def test_a_schema_older_than_this_mlflow_says_how_to_upgrade(tmp_path):
    from attnflow.tracking.runs import _store_revisions

    known, newest = _store_revisions()
    older = sorted(known - {newest})[0]
    path = tmp_path / "mlflow.db"
    _store(path, older)
    message = _refused(path)
    assert f"schema version {older} is older" in message and f"mlflow db upgrade {_uri(path)}" in message


@pytest.mark.parametrize("case", ["missing", "empty", "no tables", "current"])
def test_a_new_or_current_store_passes(tmp_path, case):
    from attnflow.tracking.runs import _store_revisions

    path = tmp_path / "mlflow.db"
    if case == "empty":
        path.write_bytes(b"")
    elif case == "no tables":
        sqlite3.connect(path).close()
    elif case == "current":
        _store(path, _store_revisions()[1])
    probe(_uri(path))
    check_sqlite_store(_uri(path))


def test_a_store_whose_folder_is_a_file_is_refused(tmp_path):
    (tmp_path / "runs").write_text("")
    assert "its folder" in _refused(tmp_path / "runs" / "mlflow.db")


def test_a_stage_run_on_a_folder_store_stops_before_mlflow_in_one_line(tmp_path):
    (tmp_path / "mlflow.db").mkdir()
    config = {
        "study": "s",
        "tracking": {"uri": _uri(tmp_path / "mlflow.db"), "experiment": "s", "enabled": True},
    }
    started = time.monotonic()
    with pytest.raises(TrackingUnavailable, match="a folder, not an SQLite database file"):
        with tracking.stage_run(config, stage="train"):
            pytest.fail("the stage body ran")
    assert time.monotonic() - started < FAST_S


@pytest.mark.xfail(
    strict=True,
    reason="known, not mended: stage_run's mlflow.set_tracking_uri also sets MLFLOW_TRACKING_URI in "
    "os.environ, and tracking_uri() prefers it, so a second stage run in the same process goes to the "
    "first run's store; the fix is in attnflow.tracking.runs/store, which every stage depends on (next "
    "full study run). Strict: it fails once mended, to drop this mark.",
)
def test_a_second_stage_run_in_one_process_goes_to_its_own_configured_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for name in ("first.db", "second.db"):
        config = {
            "study": "s",
            "tracking": {"uri": _uri(tmp_path / name), "experiment": "s", "enabled": True},
        }
        with tracking.stage_run(config, stage="train"):
            pass
    assert (tmp_path / "second.db").is_file()
