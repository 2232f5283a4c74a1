"""Pure helpers: config flattening and hashing, input md5s, metric names with layer steps."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["config_hash", "file_md5", "flatten", "inputs_md5", "layer_steps", "metric_name", "numeric"]


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings to dotted keys; lists stay values.

    >>> flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"})
    {'a.b': 1, 'a.c': [1, 2], 'd': 'x'}
    """
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def config_hash(config: Mapping[str, Any]) -> str:
    """A short stable hash of a resolved config (key order does not matter)."""
    blob = json.dumps(config, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_md5(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def inputs_md5(paths: Sequence[str | Path]) -> tuple[str, dict[str, str]]:
    """md5 of each input file (every file under a directory), and one md5 over them all."""
    per_file: dict[str, str] = {}
    for p in map(Path, paths):
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if f.exists():
                per_file[f.as_posix()] = file_md5(f)
    if not per_file:
        return "none", per_file
    if len(per_file) == 1:
        return next(iter(per_file.values())), per_file
    combined = hashlib.md5(json.dumps(per_file, sort_keys=True).encode(), usedforsecurity=False)
    return combined.hexdigest(), per_file


_BAD_NAME = re.compile(r"[^/\w.\- :]")  # what MLflow refuses in a metric name


def metric_name(name: str) -> str:
    """``name`` with every character MLflow refuses in a metric name replaced by ``_``.

    >>> metric_name("corr/attribution.blank_token=pad/flow")
    'corr/attribution.blank_token_pad/flow'
    """
    return _BAD_NAME.sub("_", name)


_LAYER = re.compile(r"(^|[/.])L(\d+)(?=$|[/.])")


def layer_steps(metrics: Mapping[str, float]) -> list[tuple[str, int | None, float]]:
    """``(name, step, value)`` per metric: a path segment ``L<k>`` is taken out of the name and
    becomes the step, so one metric per (method, reference) has one point per layer.

    >>> layer_steps({"corr/blank_out/raw/L2": 0.5, "blank_out.raw.L3.mean": 0.1, "acc": 1.0})
    [('corr/blank_out/raw', 2, 0.5), ('blank_out.raw.mean', 3, 0.1), ('acc', None, 1.0)]
    """
    out: list[tuple[str, int | None, float]] = []
    for key, value in metrics.items():
        found = _LAYER.search(key)
        if found is None:
            out.append((key, None, value))
            continue
        rest = key[found.end() :]
        name = key[: found.start()] + (rest if found.start() else rest[1:])
        out.append((name, int(found.group(2)), value))
    return out


def numeric(flat: Mapping[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in flat.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
