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
``entry.json`` (when, by which code, for what, its key and the sha256 of every stored file). It is
written under a temporary name and renamed into place, so a reader finds a whole entry or none; a
second writer of the same key keeps the first. A restore checks the key and every checksum of what it
copies before it replaces anything, and refuses a damaged or misfiled entry in one line naming the file.
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

from attnflow.io import sha256_file, umask_modes

__all__ = [
    "ENTRY_FILE",
    "PACKAGES",
    "CacheEntryError",
    "cpu_kind",
    "cpu_model",
    "digests",
    "input_files",
    "machine",
    "restore",
    "stage_key",
    "store",
]

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


def cpu_kind(cpuinfo: str | Path = "/proc/cpuinfo") -> str:
    """The CPU's model name and its widest vector extension, as a figure's machine is named (the
    kernels, hence times and trained bits, differ by it); "unknown" where ``cpuinfo`` says nothing.
    """
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown"
    flags = next((ln.partition(":")[2] for ln in text.splitlines() if ln.startswith("flags")), "").split()
    vector = next((f.upper() for f in ("avx512f", "avx2", "avx", "sse2") if f in flags), "no SIMD flag")
    return f"{cpu_model(cpuinfo) or 'unknown'} ({vector})"


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


class CacheEntryError(ValueError):
    """A stage-cache entry that fails its check (damaged, filed under another key, without
    checksums): nothing is restored; the message names the file in one line."""


def digests(path: str | Path) -> dict[str, str]:
    """sha256 of a file (``{"": digest}``) or of every file below a folder (``{relative path:
    digest}``, sorted): what an entry records of each output and a restore compares."""
    path = Path(path)
    if path.is_file():
        return {"": sha256_file(path)}
    return {f.relative_to(path).as_posix(): sha256_file(f) for f in sorted(path.rglob("*")) if f.is_file()}


def _recorded(files: Mapping[str, str], name: str) -> dict[str, str]:
    """The recorded digests of output ``name`` (keys ``name`` or ``name/<path>``), keyed as :func:`digests` keys them."""
    return {
        ("" if k == name else k[len(name) + 1 :]): v
        for k, v in files.items()
        if k == name or k.startswith(name + "/")
    }


def store(
    cache: str | Path,
    key: str,
    outputs: Mapping[str, str | Path],
    record: Mapping[str, Any],
    *,
    replace: bool = False,
) -> Path:
    """Put a run's ``outputs`` ({name: file or folder}) under ``key`` with ``record``, the key and
    the sha256 of every stored file (``files``); return the entry's folder. An existing whole entry
    is kept as it is (the same key means the same bits), unless ``replace`` (an entry a restore
    refused)."""
    cache = Path(cache)
    entry = cache / key
    if (entry / ENTRY_FILE).is_file() and not replace:
        return entry
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", dir=cache))
    aside = None
    try:
        files: dict[str, str] = {}
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
            files.update({f"{name}/{k}" if k else name: v for k, v in digests(staging / name).items()})
        stamp = {
            "key": key,
            "outputs": sorted(outputs),
            "files": files,  # sha256 of the stored copies: a restore checks every one
            "stored": datetime.now(timezone.utc).isoformat(),
        }
        (staging / ENTRY_FILE).write_text(
            json.dumps({**record, **stamp}, indent=1, default=str), encoding="utf-8"
        )
        umask_modes(staging)  # mkdtemp makes it 0700
        if entry.exists():  # a refused entry, or a killed writer's half (no entry.json): set aside
            aside = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.old.", dir=cache))
            os.replace(entry, aside / "entry")
        os.replace(staging, entry)
    except OSError:
        if (entry / ENTRY_FILE).is_file() and not replace:  # another job stored the same key first
            return entry
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    return entry


def _entry_record(entry: Path, key: str) -> dict[str, Any]:
    """The record of ``entry`` once it is known to be filed under ``key`` and to carry checksums."""
    where = entry / ENTRY_FILE
    fix = f"delete {entry} to run the stage again"
    try:
        record = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CacheEntryError(
            f"{where}: unreadable stage-cache record ({type(exc).__name__}); {fix}"
        ) from None
    if not isinstance(record, dict):
        raise CacheEntryError(f"{where}: not a stage-cache record (a JSON object); {fix}")
    if record.get("key") != key:
        raise CacheEntryError(
            f"{where}: the entry is filed under {key[:12]} but records key {str(record.get('key'))[:12]}; {fix}"
        )
    if not isinstance(record.get("files"), dict):
        raise CacheEntryError(f"{where}: no checksums (stored by older code), so it cannot be checked; {fix}")
    return record


def restore(cache: str | Path, key: str, targets: Mapping[str, str | Path]) -> dict[str, Any] | None:
    """Copy the entry's outputs to ``targets`` ({name: where}) and return its record; None (and
    nothing copied) when there is no whole entry under ``key`` or it lacks one of the names.

    Every copy is checked against the sha256 the entry recorded before any target is replaced:
    an entry whose record is unreadable, names another key or has no checksums, or whose files
    differ from their checksums, raises :class:`CacheEntryError` naming the file, and nothing is
    restored."""
    entry = Path(cache) / key
    if not (entry / ENTRY_FILE).exists():
        return None
    record = _entry_record(entry, key)
    if not all((entry / name).exists() for name in targets):
        return None
    staged: list[tuple[Path, Path]] = []
    temps: list[Path] = []
    try:
        for name, where in targets.items():
            dst = Path(where)
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
            temps.append(tmp)
            copy = tmp / "x"
            src = entry / name
            if src.is_dir():
                shutil.copytree(src, copy)
            else:
                shutil.copyfile(src, copy)
            _check(copy, _recorded(record["files"], name), entry / name, entry / ENTRY_FILE)
            staged.append((copy, dst))
        for copy, dst in staged:  # every copy checked: now replace the targets
            if dst.is_dir() and not dst.is_symlink():
                shutil.rmtree(dst)
            elif copy.is_dir() and (dst.exists() or dst.is_symlink()):
                dst.unlink()
            os.replace(copy, dst)  # a file over a file: in one step
    finally:
        for tmp in temps:
            shutil.rmtree(tmp, ignore_errors=True)
    return record


def _check(copy: Path, recorded: Mapping[str, str], source: Path, record_file: Path) -> None:
    """Raise :class:`CacheEntryError` naming the entry's file when ``copy`` differs from ``recorded``."""
    found = digests(copy)
    for rel in sorted(set(found) | set(recorded)):
        if found.get(rel) != recorded.get(rel):
            where = source / rel if rel else source
            what = (
                "is not in its record"
                if rel not in recorded
                else "is missing"
                if rel not in found
                else "differs from its recorded sha256 (damaged)"
            )
            raise CacheEntryError(
                f"{where}: {what} in {record_file}; nothing restored; delete {source.parent} to run the stage again"
            )
