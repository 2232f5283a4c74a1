"""Artifacts on disk: atomic writes (a temporary file in the target folder, renamed into place once
complete) and loads that name the file when it is missing or unreadable."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "ArtifactError",
    "align_ids",
    "atomic_path",
    "file_lock",
    "json_text",
    "load_aligned",
    "load_artifact",
    "load_ragged",
    "read_json",
    "read_parquet",
    "save_ragged",
    "sha256_file",
    "umask_modes",
    "write_bytes",
    "write_json",
    "write_parquet",
    "write_text",
    "write_together",
]

T = TypeVar("T")


class ArtifactError(ValueError):
    """A stage input exists but cannot be read; the message starts with its path."""


def load_artifact(path: str | Path, reader: Callable[[Path], T], *, what: str = "file") -> T:
    """``reader(path)``, with a missing or unreadable file reported as ``<path>: ...``.

    The one place where artifact loads turn low-level errors (a truncated safetensors file, bad
    JSON, a corrupt parquet) into messages that name the file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: {what} not found; run the stage that writes it first")
    try:
        return reader(path)
    except (ArtifactError, FileNotFoundError):
        raise
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise ArtifactError(f"{path}: unreadable {what} ({type(exc).__name__}: {first})") from exc


def read_json(path: str | Path) -> Any:
    return load_artifact(path, _json, what="JSON file")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # deeper than the parser goes: no stage writes such a file
        raise ArtifactError(
            f"{path}: unreadable JSON file: nested too deeply (over ~{sys.getrecursionlimit()} levels)"
        ) from None


def read_parquet(path: str | Path, **kwargs: Any):
    import pandas as pd

    return load_artifact(path, lambda p: pd.read_parquet(p, **kwargs), what="parquet table")


def write_parquet(path: str | Path, frame: Any) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def umask_modes(path: str | Path) -> None:
    """Give a file, or a folder and everything below it, the modes a plain ``open`` / ``mkdir``
    would (0666 / 0777 less the umask); temporary files and folders are made 0600 / 0700."""
    path = Path(path)
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chmod(p, (0o777 if p.is_dir() else 0o666) & ~_umask())


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it to ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if tmp.is_file():  # mkstemp makes 0600 files: give the result the usual umask mode
            umask_modes(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | Path, data: bytes | str) -> Path:
    """``data`` (str as UTF-8) to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def write_together(files: dict[Path, str | bytes]) -> None:
    """Write every file of ``files`` ({path: text or bytes}) beside its target first, and swap them
    all into place only once every one is written: a failure leaves every target as it was.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> write_together({d / "a.csv": "x\\n1\\n", d / "b.json": b"{}"})
    >>> sorted(p.name for p in d.iterdir())
    ['a.csv', 'b.json']
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            staged.append((Path(name), path))
            Path(name).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
            umask_modes(name)
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file's bytes, read in 1 MiB blocks, as 64 hex digits."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextmanager
def file_lock(path: str | Path) -> Iterator[Path]:
    """Hold an exclusive lock on ``path`` (created if absent, never removed) for the block; a second
    process or thread entering with the same path waits until the first leaves (``flock`` on POSIX,
    ``msvcrt.locking`` on Windows). The lock goes with the process, so a killed holder frees it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        if os.name == "nt":  # pragma: no cover - Windows
            import msvcrt

            f.seek(0)
            while True:
                try:
                    msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
                    break
                except OSError:  # LK_LOCK gives up after 10 s: keep waiting
                    continue
        else:
            import fcntl

            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        yield path  # the lock is released when the file is closed


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(v) for v in value]
    return value


def write_json(path: str | Path, payload: Any, *, default: Callable[[Any], Any] | None = None) -> None:
    """Strict JSON (NaN and infinities become null, which every JSON reader accepts), atomically.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "m.json"
    >>> write_json(p, {"rho": float("nan"), "n": [1, 2.5]})
    >>> json.loads(p.read_text())
    {'rho': None, 'n': [1, 2.5]}
    """
    write_text(path, json_text(payload, default=default))


def json_text(payload: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """The text :func:`write_json` writes: strict JSON (NaN and infinities as null), indented, one
    trailing newline."""
    return json.dumps(_finite_or_null(payload), indent=2, default=default, allow_nan=False) + "\n"


def save_ragged(
    path: str | Path,
    arrays: dict[str, list[np.ndarray]],
    *,
    ids: Any = None,
    metadata: dict[str, str] | None = None,
) -> None:
    """Store lists of variable-shape arrays in one safetensors file (no pickle), atomically.

    Each list becomes ``<name>.data`` (the arrays raveled and concatenated) and ``<name>.shapes``
    (one row of dimensions per array). All arrays of one list must share their number of dimensions.
    ``ids`` (one per array, e.g. the samples' ``sample_id``) are stored as ``sample_id`` so that
    later stages join on them, not on list positions.

    >>> import tempfile, numpy as np
    >>> p = Path(tempfile.mkdtemp()) / "r.safetensors"
    >>> save_ragged(p, {"x": [np.ones((2, 2)), np.zeros((1, 3))]})
    >>> [a.shape for a in load_ragged(p)["x"]]
    [(2, 2), (1, 3)]
    """
    from safetensors.numpy import save_file

    tensors: dict[str, np.ndarray] = {}
    for name, items in arrays.items():
        ndims = {np.ndim(a) for a in items}
        if len(ndims) > 1:
            raise ValueError(f"{name}: arrays differ in number of dimensions {sorted(ndims)}")
        ndim = ndims.pop() if ndims else 1
        tensors[f"{name}.shapes"] = np.array([np.shape(a) for a in items], dtype=np.int64).reshape(
            len(items), ndim
        )
        flat = [np.ravel(a) for a in items]
        tensors[f"{name}.data"] = np.ascontiguousarray(np.concatenate(flat) if flat else np.zeros(0))
    if ids is not None:
        ids = np.asarray(ids, dtype=np.int64)
        if any(len(items) != len(ids) for items in arrays.values()):
            raise ValueError(
                f"{path}: {len(ids)} ids for lists of {sorted({len(v) for v in arrays.values()})}"
            )
        tensors["sample_id"] = ids
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def load_ragged(path: str | Path, *, with_ids: bool = False) -> Any:
    """Inverse of :func:`save_ragged`: ``{name: [arrays]}``, or ``(that, ids)`` with ``with_ids``
    (``ids`` None when the file has none)."""
    out, ids = load_artifact(path, _read_ragged, what="safetensors file")
    return (out, ids) if with_ids else out


def _read_ragged(path: Path) -> tuple[dict[str, list[np.ndarray]], np.ndarray | None]:
    from safetensors.numpy import load_file

    tensors = load_file(str(path))
    out: dict[str, list[np.ndarray]] = {}
    for key in tensors:
        if not key.endswith(".shapes"):
            continue
        name = key[: -len(".shapes")]
        shapes, data = tensors[key], tensors[f"{name}.data"]
        sizes = np.prod(shapes, axis=1) if len(shapes) else np.zeros(0, dtype=np.int64)
        if int(sizes.sum()) != data.size:
            raise ArtifactError(
                f"{path}: {name} holds {data.size} values, its shapes need {int(sizes.sum())}"
            )
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        out[name] = [
            data[offsets[i] : offsets[i + 1]].reshape(shape) for i, shape in enumerate(map(tuple, shapes))
        ]
    return out, tensors.get("sample_id")


def load_aligned(path: str | Path, ids: Any, *, against: str) -> dict[str, list[np.ndarray]]:
    """:func:`load_ragged` of ``path``, its arrays put in the order of ``ids`` (a join on
    ``sample_id``; ``against`` names where ``ids`` come from, for the error)."""
    arrays, own = load_ragged(path, with_ids=True)
    order = align_ids(own, ids, what=str(path), against=against)
    return {name: [values[i] for i in order] for name, values in arrays.items()}


def align_ids(ids: Any, reference: Any, *, what: str, against: str, subset: bool = False) -> np.ndarray:
    """Positions in ``ids`` of each id of ``reference`` (a join on ``sample_id``); both must hold the
    same ids (with ``subset``: every id of ``reference`` is in ``ids``). ``what`` / ``against`` name
    the two files in the error.

    >>> align_ids([7, 3, 5], [3, 5, 7], what="a", against="b").tolist()
    [1, 2, 0]
    >>> align_ids([7, 3, 5], [5, 7], what="a", against="b", subset=True).tolist()
    [2, 0]
    """
    ids, reference = np.asarray(ids), np.asarray(reference)
    if len(set(ids.tolist())) != len(ids):
        raise ArtifactError(f"{what}: repeated sample ids")
    if subset and not set(reference.tolist()) <= set(ids.tolist()):
        lack = sorted(set(reference.tolist()) - set(ids.tolist()))[:5]
        raise ArtifactError(f"{what}: lacks samples of {against} ({lack}); re-run the stages in order")
    if not subset and set(ids.tolist()) != set(reference.tolist()):
        extra = sorted(set(ids.tolist()) - set(reference.tolist()))[:5]
        lack = sorted(set(reference.tolist()) - set(ids.tolist()))[:5]
        raise ArtifactError(
            f"{what}: its samples differ from {against} (only here: {extra}; only there: {lack}); "
            "re-run the stages in order"
        )
    where = {int(v): i for i, v in enumerate(ids)}
    return np.array([where[int(v)] for v in reference], dtype=np.int64)
