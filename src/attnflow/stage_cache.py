"""A store of a stage's outputs, keyed by everything the stage reads, so that a sweep job can take an
earlier job's training of the same inputs instead of running it again (what DVC's run-cache does
for ``dvc repro``).

    key = sha256( for each input file f, in the order of its label:  label(f) ‖ sha256(bytes(f)) ;
                  the stage's params as canonical JSON ;
                  the machine as canonical JSON )

The machine (Python, the packages the numbers depend on, torch's CPU capability, the CPU model, the
GPU) is part of the key: a training repeats bit for bit on one kind of machine
(docs/determinism.md), not across kinds, so an entry made on another CPU is never taken.

An entry is the folder ``<cache>/<key>/`` with the stage's outputs under their names and
``entry.json`` (when, by which code, for what). It is written under a temporary name and renamed
into place, so a reader finds a whole entry or none; a second writer of the same key keeps the first.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from attnflow.io import umask_modes

__all__ = ["ENTRY_FILE", "PACKAGES", "cpu_model", "input_files", "machine", "restore", "stage_key", "store"]

ENTRY_FILE = "entry.json"  # in each entry; written last, so its presence means the entry is whole
PACKAGES = ("torch", "pytorch-lightning", "lightning", "transformers", "numpy")  # whose versions key an entry
_SKIP = ("__pycache__",)  # a folder input's files, less interpreter caches


def input_files(inputs: Mapping[str, str | Path]) -> dict[str, Path]:
    """Every file behind ``inputs`` ({label: file or folder}), labelled ``label`` or
    ``label/<path inside the folder>``, sorted by label. A missing input is an error: a key made
    without it would not say what the stage read."""
    files: dict[str, Path] = {}
    for label, where in inputs.items():
        path = Path(where)
        if path.is_file():
            files[label] = path
        elif path.is_dir():
            for f in path.rglob("*"):
                if f.is_file() and not any(part in _SKIP for part in f.relative_to(path).parts):
                    files[f"{label}/{f.relative_to(path).as_posix()}"] = f
        else:
            raise FileNotFoundError(f"stage input {label}: {path} does not exist")
    return dict(sorted(files.items()))


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def stage_key(inputs: Mapping[str, str | Path], params: Mapping[str, Any], machine: Mapping[str, Any]) -> str:
    """The key of a stage's run: its input files' labels and bytes, its params and the machine
    (module docstring). Two runs share a key exactly when all three are equal."""
    h = hashlib.sha256()
    for label, path in input_files(inputs).items():
        h.update(label.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    h.update(b"\0params\0" + _canonical(params))
    h.update(b"\0machine\0" + _canonical(machine))
    return h.hexdigest()


def cpu_model(cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The CPU's model name: the first ``model name`` line of ``cpuinfo``, else what Python's
    ``platform`` says, else None."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def machine(packages: Iterable[str] = PACKAGES) -> dict[str, Any]:
    """What a training's bits depend on besides its inputs: Python, package versions, the CPU
    (model, architecture, torch's vector capability) and the GPU, if torch sees one."""
    import torch

    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "python": platform.python_version(),
        "packages": versions,
        "cpu": cpu_model(),
        "arch": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def _copy(src: Path, dst: Path) -> None:
    """Copy a file or folder to ``dst`` through a temporary sibling renamed into place (a folder
    already at ``dst`` is replaced)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
    staged = tmp / "x"
    try:
        if src.is_dir():
            shutil.copytree(src, staged)
            if dst.is_dir() and not dst.is_symlink():
                shutil.rmtree(dst)
            elif dst.exists() or dst.is_symlink():
                dst.unlink()
        else:
            shutil.copyfile(src, staged)
        os.replace(staged, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def store(cache: str | Path, key: str, outputs: Mapping[str, str | Path], record: Mapping[str, Any]) -> Path:
    """Put a run's ``outputs`` ({name: file or folder}) under ``key`` with ``record``; return the
    entry's folder. An existing whole entry is kept as it is (the same key means the same bits)."""
    cache = Path(cache)
    entry = cache / key
    if (entry / ENTRY_FILE).is_file():
        return entry
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=cache))
    try:
        for name, path in outputs.items():
            if Path(name).name != name or name in ("", ".", "..", ENTRY_FILE):
                raise ValueError(f"stage cache: output name {name!r} is not a plain file name")
            src = Path(path)
            if src.is_dir():
                shutil.copytree(src, staging / name)
            elif src.is_file():
                shutil.copyfile(src, staging / name)
            else:
                raise FileNotFoundError(f"stage cache: output {name}: {src} does not exist")
        stamp = {"key": key, "outputs": sorted(outputs), "stored": datetime.now(timezone.utc).isoformat()}
        (staging / ENTRY_FILE).write_text(
            json.dumps({**record, **stamp}, indent=1, default=str), encoding="utf-8"
        )
        umask_modes(staging)  # mkdtemp makes it 0700
        if entry.exists():  # a half-written entry of a killed writer (no entry.json): replace it
            shutil.rmtree(entry)
        os.replace(staging, entry)
    except OSError:
        if (entry / ENTRY_FILE).is_file():  # another job stored the same key first
            return entry
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return entry


def restore(cache: str | Path, key: str, targets: Mapping[str, str | Path]) -> dict[str, Any] | None:
    """Copy the entry's outputs to ``targets`` ({name: where}) and return its record; None (and
    nothing copied) when there is no whole entry under ``key`` or it lacks one of the names."""
    entry = Path(cache) / key
    try:
        record = json.loads((entry / ENTRY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not all((entry / name).exists() for name in targets):
        return None
    for name, where in targets.items():
        _copy(entry / name, Path(where))
    return record
