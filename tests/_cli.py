"""The `attnflow` command line run in the test's own process, as `python -m attnflow.cli` runs it.

A new interpreter pays ~5 s of `import torch, transformers` on a 2-core machine before the verb
starts (35 cases paid it: half of the default tier's CPU time). `run_cli` calls the same
`attnflow.cli.main` with the same argv, stdin as bytes and stdout / stderr as UTF-8 pipes, and
returns what `subprocess.run(..., text=True)` returns. What only a real process shows -- the
console script, `run()`'s quick exit, a pipe the reader closes -- stays in subprocess tests
(`test_cli.py`'s MiniLM run, `test_cli_hostile.py`'s terminal escapes, the slow cases of
`tests/unit/test_cli_outputs.py`).
"""

from __future__ import annotations

import io
import subprocess
import sys

from attnflow.cli import main


def _pipe() -> io.TextIOWrapper:
    """A text stream over bytes, as a child's stdout / stderr pipe is (UTF-8, not a terminal)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """`attnflow.cli.main(args)` with its own stdin, stdout and stderr; an exception that escapes
    `main` (a traceback, in a process) fails the calling test with that exception."""
    saved = sys.stdin, sys.stdout, sys.stderr
    out, err = _pipe(), _pipe()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    sys.stdout, sys.stderr = out, err
    try:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        text = [s.buffer.getvalue().decode("utf-8") for s in (out, err)]  # type: ignore[attr-defined]
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return subprocess.CompletedProcess(["attnflow", *args], code, text[0], text[1])
