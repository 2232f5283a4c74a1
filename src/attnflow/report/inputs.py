"""Reading one task's stage outputs for the report, tolerating any of them being absent.

Paths (relative to the ``reports`` and ``outputs`` folders):

- ``reports/<task>/correlations.json``, ``correlations_per_head.json`` (optional),
  ``train_metrics.json``, ``data_summary.json``
- ``outputs/capture/<task>/samples.parquet``, ``outputs/explain/<task>/maps.safetensors``
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnflow.io import load_ragged

__all__ = [
    "MAP_METHODS",
    "TaskInputs",
    "find_examples",
    "input_paths",
    "load_task",
    "locate_examples",
    "normalize_text",
    "pick_samples",
]

MAP_METHODS = ("raw", "rollout", "flow")


def input_paths(task: str, reports: Path, outputs: Path) -> dict[str, Path]:
    """Every file the report reads for ``task``, by role."""
    r = Path(reports) / task
    return {
        "correlations": r / "correlations.json",
        "per_head": r / "correlations_per_head.json",
        "sensitivity": r / "sensitivity.json",
        "train_metrics": r / "train_metrics.json",
        "data_summary": r / "data_summary.json",
        "samples": Path(outputs) / "capture" / task / "samples.parquet",
        "maps": Path(outputs) / "explain" / task / "maps.safetensors",
    }


@dataclass
class TaskInputs:
    task: str
    correlations: dict[str, Any] | None = None
    per_head: dict[str, Any] | None = None
    sensitivity: dict[str, Any] | None = None  # {variant: correlations layout}, means only
    train_metrics: dict[str, Any] | None = None
    data_summary: dict[str, Any] | None = None
    samples: pd.DataFrame | None = None
    maps: dict[str, list[np.ndarray]] | None = None
    missing: list[str] = field(default_factory=list)  # paths not found (the optional per-head file excluded)
    problems: list[str] = field(default_factory=list)  # files found but unreadable

    @property
    def empty(self) -> bool:
        return self.correlations is None and self.train_metrics is None and self.samples is None


def _json(path: Path, into: TaskInputs, *, optional: bool = False) -> dict[str, Any] | None:
    if not path.is_file():
        if not optional:
            into.missing.append(path.as_posix())
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        into.problems.append(f"{path.as_posix()}: {exc}")
        return None


def load_task(task: str, reports: Path, outputs: Path) -> TaskInputs:
    """Load what exists; record what does not (``missing``) or cannot be read (``problems``)."""
    paths = input_paths(task, reports, outputs)
    got = TaskInputs(task)
    got.correlations = _json(paths["correlations"], got)
    got.per_head = _json(paths["per_head"], got, optional=True)
    got.sensitivity = _json(paths["sensitivity"], got, optional=True)
    got.train_metrics = _json(paths["train_metrics"], got)
    got.data_summary = _json(paths["data_summary"], got)
    for key in ("samples", "maps"):
        path = paths[key]
        if not path.is_file():
            got.missing.append(path.as_posix())
            continue
        try:
            if key == "samples":
                got.samples = pd.read_parquet(path).reset_index(drop=True)
            else:
                got.maps = {k: v for k, v in load_ragged(path).items() if k in MAP_METHODS}
        except Exception as exc:  # a corrupt file must not stop the whole report
            got.problems.append(f"{path.as_posix()}: {exc}")
    if got.samples is not None and got.maps:
        n_maps = {len(v) for v in got.maps.values()}
        if n_maps != {len(got.samples)}:
            got.problems.append(
                f"{paths['maps'].as_posix()}: {sorted(n_maps)} maps for {len(got.samples)} samples; maps not drawn"
            )
            got.maps = None
    return got


def normalize_text(text: str) -> str:
    """Whitespace-normalised text (runs of whitespace to one space, stripped).

    >>> normalize_text("  the article  on\\tNNP ")
    'the article on NNP'
    """
    return " ".join(str(text).split())


def find_examples(samples: pd.DataFrame, examples: Sequence[str]) -> dict[str, int | None]:
    """Row position of each example text in ``samples`` (exact match after whitespace normalisation)."""
    texts = [normalize_text(t) for t in samples["text"].tolist()]
    first: dict[str, int] = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    return {ex: first.get(normalize_text(ex)) for ex in examples}


def locate_examples(prepared: Path, examples: Sequence[str]) -> dict[str, list[str]]:
    """The prepared splits (``<prepared>/<split>.parquet``) holding each example text; {} without data.

    Says why an example is not among the captured samples (e.g. the split put it in ``train``).
    """
    found: dict[str, list[str]] = {ex: [] for ex in examples}
    wanted = {normalize_text(ex): ex for ex in examples}
    for path in sorted(Path(prepared).glob("*.parquet")) if examples else []:
        try:
            texts = pd.read_parquet(path, columns=["text"])["text"]
        except Exception:  # an unreadable split is not the report's problem
            continue
        hits = {normalize_text(t) for t in texts.tolist()} & set(wanted)
        for norm in hits:
            found[wanted[norm]].append(path.stem)
    return found


def pick_samples(samples: pd.DataFrame, n: int) -> list[int]:
    """``n`` fixed rows: the first correctly and the first wrongly classified (by ``sample_id``) when
    present, then the next rows in ``sample_id`` order. Returns row positions, in ``sample_id`` order.

    >>> df = pd.DataFrame({"sample_id": [5, 1, 3, 9], "label": [1, 0, 1, 0], "pred": [0, 0, 1, 0]})
    >>> pick_samples(df, 2)  # first correct: sample 1 (row 1); first wrong: sample 5 (row 0)
    [1, 0]
    >>> pick_samples(df, 3)
    [1, 2, 0]
    """
    if n <= 0 or samples.empty:
        return []
    ids = samples["sample_id"].to_numpy() if "sample_id" in samples else np.arange(len(samples))
    order = [int(i) for i in np.argsort(ids, kind="stable")]
    picks: list[int] = []
    if {"label", "pred"} <= set(samples.columns):
        label, pred = samples["label"].to_numpy(), samples["pred"].to_numpy()
        correct = next((i for i in order if label[i] >= 0 and pred[i] == label[i]), None)
        wrong = next((i for i in order if label[i] >= 0 and pred[i] != label[i]), None)
        picks = [i for i in (correct, wrong) if i is not None][:n]
    for i in order:
        if len(picks) >= n:
            break
        if i not in picks:
            picks.append(i)
    rank = {i: r for r, i in enumerate(order)}
    return sorted(picks, key=rank.__getitem__)
