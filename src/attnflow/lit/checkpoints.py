"""Which checkpoint a training run may continue, and replacing checkpoints without losing them.

A run resumes only an *interrupted* run of the *same* config, seed, data and code: the checkpoint
carries a fingerprint of all four and a ``finished`` flag. A finished run, or one written by
another config or another version of the code, is never continued: training starts from scratch,
and the old checkpoints are moved aside (``.<name>.previous``) until the new run has replaced
them, then deleted; if the new run fails they are put back.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from attnflow.io import atomic_path

__all__ = [
    "CHECKPOINTS",
    "fingerprint",
    "kept_aside",
    "read_checkpoint",
    "recover",
    "resume_decision",
    "source_digest",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

CHECKPOINTS = ("last.ckpt", "best.ckpt")
# The code a trained model depends on: a change here makes old checkpoints foreign.
_CODE_PACKAGES = ("lit", "models", "tasks")


def source_digest(packages: Sequence[str] = _CODE_PACKAGES) -> str:
    """sha256 over the Python sources of the given ``attnflow`` subpackages (path and bytes)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def fingerprint(
    task: str, settings: Mapping[str, Any], seed: int, data_dir: Path, data_files: Sequence[str]
) -> str:
    """What a checkpoint must match to be resumed: task, settings, seed, data bytes and code."""
    h = hashlib.sha256()
    h.update(json.dumps([task, settings, seed], sort_keys=True, default=str).encode())
    for name in data_files:
        path = data_dir / name
        h.update(name.encode())
        h.update(path.read_bytes() if path.is_file() else b"<missing>")
    h.update(source_digest().encode())
    return h.hexdigest()[:16]


def read_checkpoint(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated file, or not a checkpoint at all
        first = (str(exc).splitlines() or [""])[0]
        raise RuntimeError(
            f"cannot read checkpoint {path} ({type(exc).__name__}: {first}); delete it or set train.resume=false"
        ) from exc


def write_checkpoint(path: Path, ckpt: dict[str, Any]) -> None:
    """``ckpt`` to ``path`` atomically, through a buffer: ``torch.save`` to a file names the archive
    inside after the file (here a random temporary name), to a buffer always ``archive``, so the
    bytes depend on the content only."""
    buffer = io.BytesIO()
    torch.save(ckpt, buffer)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())


def resume_decision(out_dir: Path, fp: str, resume: bool) -> tuple[bool, str]:
    """(continue from ``out_dir/last.ckpt``?, why) for a run with fingerprint ``fp``."""
    last = out_dir / "last.ckpt"
    if not last.is_file():
        return False, "no checkpoint: training from scratch"
    if not resume:
        return False, f"{last} exists but train.resume=false: training from scratch"
    meta = read_checkpoint(last).get("attnflow", {})
    if meta.get("fingerprint") != fp:
        return False, f"{last} was written by a different config, seed, data or code: training from scratch"
    if meta.get("finished"):
        return False, f"{last} is a finished run: training again from scratch"
    return True, f"resuming the interrupted run in {last} (epoch {read_checkpoint(last).get('epoch', '?')})"


def _aside(path: Path) -> Path:
    return path.with_name(f".{path.name}.previous")


def recover(out_dir: Path, names: Sequence[str] = CHECKPOINTS) -> None:
    """Put back checkpoints a killed run left aside without writing a replacement."""
    for name in names:
        path = out_dir / name
        if _aside(path).is_file():
            if path.is_file():
                _aside(path).unlink()
            else:
                os.replace(_aside(path), path)


@contextmanager
def kept_aside(out_dir: Path, names: Sequence[str] = CHECKPOINTS) -> Iterator[None]:
    """Move existing checkpoints aside for a fresh run; delete them once the block succeeds. If it
    fails, each one the new run has not replaced is put back (a new, resumable checkpoint wins)."""
    moved = []
    for name in names:
        path = out_dir / name
        if path.is_file():
            os.replace(path, _aside(path))
            moved.append(path)
    try:
        yield
    except BaseException:
        for path in moved:
            if path.is_file():
                _aside(path).unlink()
            else:
                os.replace(_aside(path), path)
        raise
    for path in moved:
        _aside(path).unlink(missing_ok=True)
