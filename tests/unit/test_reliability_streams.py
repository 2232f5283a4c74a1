"""Reliability round 5 (issue 57), the command line with a standard stream closed before the start.

``attnflow explain ... 2>&-`` exited 1 with no message after writing every file (round 4: exit 0):
Python sets sys.stderr to None for a closed fd 2, and the quick exit's flush of sys.stderr raised
AttributeError, whose traceback had nowhere to go. An error line (``tell``) went to stdout instead.
Now a closed stream is /dev/null in its place: ``2>&-`` changes nothing but the missing messages,
``>&-`` is a failing stdout once there is a table to print (one line, exit 1) and nothing with
``--quiet``.

The real closed descriptors run the entry point in a subprocess through ``sh -c '... 2>&-'``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "attnflow.cli"]
TIMEOUT_S = 300


def _shell(redirect: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the CLI under ``sh`` with `redirect` (``2>&-``, ``>&-``) applied to it."""
    script = f'exec "$@" {redirect}'
    return subprocess.run(
        ["sh", "-c", script, "sh", *CLI, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


class _StderrHandler(logging.StreamHandler):
    """A log handler that writes to whatever sys.stderr is at each call (as MLflow's does)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass

    def flush(self) -> None:
        self.stream.flush()


def test_the_quick_exit_with_no_stderr_keeps_the_exit_code(monkeypatch):
    """sys.stderr is None (fd 2 closed at the start): `run` ends with main's code, not a crash, even
    with a log handler on sys.stderr for logging.shutdown to flush."""
    import attnflow.cli as cli

    exits: list[int] = []
    handler = _StderrHandler()
    monkeypatch.setattr(cli, "main", lambda: 0)
    monkeypatch.setattr(sys, "stderr", None)
    monkeypatch.setattr(cli.os, "_exit", exits.append)
    try:
        cli.run()
    finally:
        handler.close()
    assert exits == [0]


def test_an_error_with_stderr_closed_exits_2_and_prints_nothing_to_stdout(tmp_path):
    done = _shell("2>&-", "explain", "--model", "x", "--text", "good", "--format", "jpeg", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""


def test_an_error_with_stdin_and_stdout_closed_keeps_its_line_on_stderr(tmp_path):
    done = _shell(">&- <&-", "explain", "--model", "x", "--text", "good", "--format", "jpeg", cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--format 'jpeg'" in lines[0]


def test_a_closed_stdin_reads_as_empty_for_file_dash(tmp_path):
    done = _shell("<&-", "explain", "--model", "x", "--file", "-", cwd=tmp_path)
    assert done.returncode == 2
    assert "--file -: no text in it" in done.stderr and "Traceback" not in done.stderr


def test_closed_streams_are_reopened_on_devnull_in_process(monkeypatch):
    """`standard_streams` replaces a None sys.stdout / sys.stderr and remembers that stdout is closed."""
    from attnflow.cli import stdout

    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", None)
    monkeypatch.setattr(sys, "stdin", None)
    stdout.reset()
    try:
        stdout.standard_streams()
        assert sys.stdout is not None and sys.stderr is not None and sys.stdin.read() == ""
        stdout.tell("to /dev/null")
        assert stdout.finish(0, "explain") == 0  # nothing printed yet: nothing lost
        stdout.say("a table")
        assert stdout.finish(0, "explain") == stdout.EXIT_STDOUT_FAILED
    finally:
        stdout.reset()


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from tests._tiny import make_tiny_bert

    return make_tiny_bert(tmp_path_factory.mktemp("bert"))


def _explain_args(bert: Path, out: Path, *extra: str) -> list[str]:
    return ["explain", "--model", str(bert), "--device", "cpu", "--method", "raw,rollout", "--out", str(out),
            "--format", "json", "--text", "good movie", *extra]  # fmt: skip


@pytest.mark.slow
def test_a_run_with_stderr_closed_exits_0_and_prints_its_table(bert, tmp_path):
    done = _shell("2>&-", *_explain_args(bert, tmp_path / "d"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    assert "good movie" in done.stdout and "Traceback" not in done.stdout
    assert (tmp_path / "d" / "explain.json").stat().st_size > 0


@pytest.mark.slow
def test_a_run_with_stdout_closed_writes_its_files_and_says_the_table_is_lost(bert, tmp_path):
    done = _shell(">&-", *_explain_args(bert, tmp_path / "d"), cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode == 1
    assert len(errors) == 1 and "standard output (it is closed)" in errors[0]
    assert (tmp_path / "d" / "explain.json").stat().st_size > 0
    quiet = _shell(">&- 2>&-", *_explain_args(bert, tmp_path / "q", "--quiet"), cwd=tmp_path)
    assert quiet.returncode == 0
    assert (tmp_path / "q" / "explain.json").stat().st_size > 0
