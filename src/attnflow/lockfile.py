"""What ``dvc.lock`` records of a stage execution, read without DVC (and while ``dvc repro`` holds
its lock): the file itself (`read_lock`), an execution's name (`lock_key`), the executions not
among a set of names (`unrecorded`), the md5 per dependency an execution ran with (`lock_deps`),
and that md5 computed from the working tree (`lock_md5`), so a stage's recorded code can be checked
against the checkout.

A file: the md5 of its bytes. A folder (DVC 3's tree hash): the md5 of the JSON text of the list
``[{"md5": m_i, "relpath": p_i}]`` of the files under it, sorted by ``relpath`` (posix, relative to
the folder), dumped with sorted keys, then the suffix ``.dir``::

    md5(folder) = md5(json.dumps(sorted([{"md5": md5(f), "relpath": rel(f)} for f in files], key=relpath),
                                 sort_keys=True)) + ".dir"

Files under a folder named in ``ignored`` are left out, as the project's ``.dvcignore`` leaves out
``**/__pycache__/``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

__all__ = ["IGNORED", "lock_deps", "lock_key", "lock_md5", "read_lock", "unrecorded"]

IGNORED = frozenset({"__pycache__"})  # .dvcignore: **/__pycache__/


def _file_md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lock_md5(path: str | Path, ignored: Collection[str] = IGNORED) -> str | None:
    """The md5 dvc.lock records for ``path`` (a file's, or a folder's ``<md5>.dir``; see the module
    docstring); None when ``path`` does not exist."""
    path = Path(path)
    if path.is_file():
        return _file_md5(path)
    if not path.is_dir():
        return None
    entries = [
        {"md5": _file_md5(f), "relpath": f.relative_to(path).as_posix()}
        for f in path.rglob("*")
        if f.is_file() and not ignored.intersection(f.relative_to(path).parts[:-1])
    ]
    entries.sort(key=lambda e: e["relpath"])
    text = json.dumps(entries, sort_keys=True).encode("utf-8")
    return hashlib.md5(text, usedforsecurity=False).hexdigest() + ".dir"


def lock_key(stage: str, task: str | None) -> str:
    """A stage execution's name in dvc.lock: ``<stage>@<task>``, or ``<stage>`` for a stage that runs once."""
    return f"{stage}@{task}" if task else stage


def lock_deps(lock: Mapping[str, Any], stage: str, task: str | None) -> dict[str, str]:
    """The md5 per dependency that ``lock`` (dvc.lock, parsed) holds for the stage execution; empty
    when the lock has no such execution."""
    entry = (lock.get("stages") or {}).get(lock_key(stage, task)) or {}
    return {d["path"]: d["md5"] for d in entry.get("deps") or [] if "md5" in d}


def unrecorded(lock: Mapping[str, Any], have: Collection[str]) -> list[tuple[str, str | None]]:
    """The stage executions of ``lock`` as (stage, task or None), in its order, whose `lock_key`
    is not in ``have``."""
    found = []
    for key in lock.get("stages") or {}:
        stage, _, task = key.partition("@")
        if key not in have:
            found.append((stage, task or None))
    return found


def read_lock(path: str | Path) -> dict[str, Any]:
    """dvc.lock at ``path``, parsed; empty when there is none. ValueError naming the file when it is
    not a YAML mapping."""
    import yaml

    path = Path(path)
    if not path.is_file():
        return {}
    try:
        # libyaml's parser where PyYAML has it: dvc.lock runs to thousands of lines (0.33 s in Python)
        lock = (
            yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            or {}
        )
    except yaml.YAMLError as exc:  # one line: the line and what the parser found there
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{path}: not YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(lock, dict):
        raise ValueError(f"{path}: expected a mapping with 'stages', got {type(lock).__name__}")
    return lock
