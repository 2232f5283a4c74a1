"""Reading tab-separated text files line by line, with errors that name the file and line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["DataFormatError", "length_stats", "read_fields", "require_rows"]


class DataFormatError(ValueError):
    """A malformed input line; the message starts with ``file:line:``."""


def read_fields(
    path: Path, n_fields: int, *, header: tuple[str, ...] | None = None
) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, fields) for every line of a UTF-8 TSV; blank final newline allowed.

    Raises :class:`DataFormatError` on bad encoding, a wrong field count, or a wrong header.
    """
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataFormatError(
                    f"{path}:{number}: not valid UTF-8 ({exc.reason} at byte {exc.start})"
                ) from None
            line = line.rstrip("\r\n")
            fields = line.split("\t")
            if number == 1 and header is not None:
                if tuple(fields) != header:
                    raise DataFormatError(f"{path}:1: expected header {'<TAB>'.join(header)!r}, got {line!r}")
                continue
            if len(fields) != n_fields:
                raise DataFormatError(
                    f"{path}:{number}: expected {n_fields} tab-separated fields, got "
                    f"{len(fields)}: {line[:80]!r}"
                )
            yield number, fields


def require_rows(path: Path, n_rows: int) -> None:
    """An input file without data rows is an error at prepare, not a crash three stages later."""
    if n_rows == 0:
        raise DataFormatError(f"{path}: no data rows (empty file, or a header only)")


def length_stats(lengths: list[int] | np.ndarray) -> dict[str, float]:
    a = np.asarray(lengths, dtype=float)
    if a.size == 0:
        return {"min": 0, "mean": 0.0, "median": 0.0, "p95": 0.0, "max": 0}
    return {
        "min": int(a.min()),
        "mean": round(float(a.mean()), 3),
        "median": float(np.median(a)),
        "p95": float(np.percentile(a, 95)),
        "max": int(a.max()),
    }
