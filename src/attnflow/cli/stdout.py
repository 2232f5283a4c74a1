"""Printing to a reader that may go away: the tables go to stdout only after every file is written,
and a stdout that fails ends the printing, never the command.

- The reader left (``| head -1``, ``| true``: EPIPE): printing stops quietly, the rest of the command
  runs (its files are already complete) and the exit code is `EXIT_READER_GONE` (141, the shell's
  128 + SIGPIPE convention for "the reader went away").
- Any other failure (``> /dev/full``: ENOSPC, EIO): printing stops, the command ends with one line
  on stderr naming standard output and the reason, exit code `EXIT_STDOUT_FAILED` (1).

stderr never raises (`tell`, and `guarded_stderr` around a verb for progress bars and warnings): a
closed stderr costs nothing either.

A stream closed before the start (``2>&-``, ``>&-``, ``<&-``: Python then sets sys.stderr, sys.stdout
or sys.stdin to None) is reopened on /dev/null by `standard_streams`, so no file the command opens
takes its descriptor and no library writing to fd 2 writes into an output. A closed stderr changes
nothing else (exit 0 on success); a closed stdout is like a failing one once there is a table to
print ("it is closed", exit 1), and costs nothing when there is none (``--quiet``).
"""

from __future__ import annotations

import errno
import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

__all__ = [
    "EXIT_READER_GONE",
    "EXIT_STDOUT_FAILED",
    "finish",
    "guarded_stderr",
    "say",
    "standard_streams",
    "tell",
]

EXIT_READER_GONE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away
EXIT_STDOUT_FAILED = 1

# What happened to stdout in this process: None (fine), "gone" (EPIPE) or the OSError's reason;
# "closed": stdout was closed before the start (said only once a line is to be printed).
_state: dict[str, str | None] = {"stdout": None, "closed": None}
CLOSED = "it is closed"


def _reopen_closed_descriptors() -> list[int]:
    """Open /dev/null on each of fds 0, 1, 2 that is closed; returns the ones reopened."""
    reopened = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            except OSError:
                continue
            if null != fd:  # the lowest free descriptor is `fd` itself unless a lower one was closed too
                os.dup2(null, fd)
                os.close(null)
            reopened.append(fd)
    return reopened


def standard_streams() -> None:
    """Give a stream closed before the start (``2>&-``: sys.stderr is None) a /dev/null to write to,
    and remember a closed stdout so that a table to print is said to be lost (`finish`)."""
    reopened = _reopen_closed_descriptors()
    if sys.stdout is None or 1 in reopened:
        _state["closed"] = CLOSED
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # lives as long as the process
    if sys.stderr is None or 2 in reopened:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")
    if sys.stdin is None or 0 in reopened:  # ``<&-``: ``--file -`` reads nothing, as from /dev/null
        sys.stdin = open(os.devnull, encoding="utf-8")


def _silence_stdout() -> None:
    """Point fd 1 and sys.stdout at /dev/null, so no later flush (ours, the interpreter's) fails again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # no real fd (a test's capture): drop the stream
        pass
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # lives as long as the process


def _failed(exc: OSError) -> None:
    if _state["stdout"] is None:
        gone = isinstance(exc, BrokenPipeError) or exc.errno in (errno.EPIPE, errno.ECONNRESET)
        _state["stdout"] = "gone" if gone else (exc.strerror or type(exc).__name__)
    _silence_stdout()


def say(text: str = "") -> None:
    """Print `text` (a line) to stdout and flush it; after a failure of stdout, nothing is printed."""
    if _state["stdout"] is not None:
        return
    if _state["closed"] is not None:
        _state["stdout"] = _state["closed"]
        return
    try:
        print(text, file=sys.stdout, flush=True)
    except (OSError, ValueError) as exc:  # ValueError: the stream was closed
        _failed(exc if isinstance(exc, OSError) else BrokenPipeError(errno.EPIPE, str(exc)))


def tell(text: str) -> None:
    """Print `text` (a line) to stderr; a stderr that cannot be written is ignored."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def finish(code: int, verb: str) -> int:
    """The exit code once a verb returned `code`: stdout flushed, its failure (if any) said and counted."""
    if _state["stdout"] is None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError) as exc:
            _failed(exc if isinstance(exc, OSError) else BrokenPipeError(errno.EPIPE, str(exc)))
    what = _state["stdout"]
    if what is None or code not in (0, EXIT_READER_GONE):
        return code
    if what == "gone":
        return EXIT_READER_GONE
    tell(
        f"attnflow {verb}: error: cannot print to standard output ({what}); files are written before printing"
    )
    return EXIT_STDOUT_FAILED


class _GuardedStream(io.TextIOBase):
    """A text stream that drops what it cannot write: stderr carries progress bars, warnings and the
    "wrote" line, none worth a lost output when its reader is gone (``2>&1 | true``)."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._gone = stream, False

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if not self._gone:
            try:
                self._stream.write(s)
            except (OSError, ValueError):
                self._gone = True
        return len(s)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._gone = True

    def isatty(self) -> bool:
        try:
            return bool(self._stream.isatty())
        except (OSError, ValueError, AttributeError):
            return False

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", "utf-8")


@contextmanager
def guarded_stderr() -> Iterator[None]:
    """Within the block, sys.stderr drops what it cannot write instead of raising."""
    saved = sys.stderr
    sys.stderr = _GuardedStream(saved)
    try:
        yield
    finally:
        with suppress(Exception):
            sys.stderr.flush()
        sys.stderr = saved


def reset() -> None:
    """Forget a failure of stdout (for a second `main` call in one process, e.g. in tests)."""
    _state["stdout"] = _state["closed"] = None
