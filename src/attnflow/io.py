"""Atomic writes: a temporary file in the target folder, renamed into place once complete."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["atomic_path", "load_ragged", "save_ragged", "write_json", "write_text"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


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
    text = json.dumps(_finite_or_null(payload), indent=2, default=default, allow_nan=False)
    write_text(path, text + "\n")


def save_ragged(
    path: str | Path, arrays: dict[str, list[np.ndarray]], *, metadata: dict[str, str] | None = None
) -> None:
    """Store lists of variable-shape arrays in one safetensors file (no pickle), atomically.

    Each list becomes ``<name>.data`` (the arrays raveled and concatenated) and ``<name>.shapes``
    (one row of dimensions per array). All arrays of one list must share their number of dimensions.

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
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata=metadata)


def load_ragged(path: str | Path) -> dict[str, list[np.ndarray]]:
    """Inverse of :func:`save_ragged`."""
    from safetensors.numpy import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; run the stage that writes it first")
    tensors = load_file(str(path))
    out: dict[str, list[np.ndarray]] = {}
    for key in tensors:
        if not key.endswith(".shapes"):
            continue
        name = key[: -len(".shapes")]
        shapes, data = tensors[key], tensors[f"{name}.data"]
        sizes = np.prod(shapes, axis=1) if len(shapes) else np.zeros(0, dtype=np.int64)
        if int(sizes.sum()) != data.size:
            raise ValueError(f"{path}: {name} holds {data.size} values, its shapes need {int(sizes.sum())}")
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        out[name] = [
            data[offsets[i] : offsets[i + 1]].reshape(shape) for i, shape in enumerate(map(tuple, shapes))
        ]
    return out
