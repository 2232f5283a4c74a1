"""Reading one task's stage outputs for the report, tolerating any of them being absent.

Every path comes from :class:`attnflow.paths.StudyPaths`: the correlation table
(``correlations.parquet``), ``train_metrics.json``, ``data_summary.json``, the captured samples and
the explanation maps (joined to the samples on ``sample_id``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnflow.io import ArtifactError, align_ids, load_artifact, load_ragged, read_json, read_parquet
from attnflow.methods import map_methods
from attnflow.paths import StudyPaths

__all__ = [
    "MAP_METHODS",
    "MissingInputs",
    "TaskInputs",
    "check_inputs",
    "find_examples",
    "input_paths",
    "load_task",
    "locate_examples",
    "missing_inputs",
    "normalize_text",
    "optional_groups",
    "pick_samples",
    "read_sweep_table",
    "sentence_frames",
]

MAP_METHODS = map_methods()  # drawn first, in this order, when present: the records' `figure`


def read_sweep_table(path: Path) -> pd.DataFrame | None:
    """A sweep's stacked table; None when the file is absent or empty (no sweep finished)."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    return load_artifact(path, pd.read_csv, what="sweep table")


def sentence_frames(paths: StudyPaths, tasks: Sequence[str], seed: int) -> dict[str, pd.DataFrame]:
    """The per-sentence frames of the claims ledger (:mod:`attnflow.metrics.ledger`), each absent
    when its files are: "correlations" and "entropy" from this run's ``sentences.parquet`` of each
    task (as ``seed``) and a seed sweep's stacked ones; "pronouns" from the pronoun test's scores
    (its ``variant`` column, or "plain" for a table from before the corrections; the rows of the
    antecedent reduction the stage reported in its ``summary.json``)."""
    runs = [read_parquet(paths.sentence_correlations(t)).assign(seed=seed) for t in tasks
            if paths.sentence_correlations(t).is_file()]  # fmt: skip
    if paths.sweep_sentences().is_file():
        runs.append(read_parquet(paths.sweep_sentences()))
    frames: dict[str, pd.DataFrame] = {}
    if runs:
        stacked = pd.concat(runs, ignore_index=True).drop_duplicates(
            ["task", "seed", "sentence", "importance", "method", "layer"]
        )
        frames["correlations"] = stacked
        frames["entropy"] = stacked.drop_duplicates(["task", "seed", "sentence", "method", "layer"])
    scores = paths.reports / "pronouns" / "scores.parquet"
    if scores.is_file():
        table = read_parquet(scores)
        if "variant" not in table:
            table = table.assign(variant="plain")
        summary = paths.reports / "pronouns" / "summary.json"
        if "reduce" in table and summary.is_file():  # the reduction the stage reported (pronouns.reduce)
            table = table[table["reduce"] == read_json(summary)["reduce"]]
        frames["pronouns"] = table.rename(columns={"sentence_id": "sentence"}).assign(seed=seed)
    return frames


def input_paths(task: str, paths: StudyPaths) -> dict[str, Path]:
    """Every file the report reads for ``task``, by role."""
    return {
        "table": paths.correlations(task),
        "train_metrics": paths.train_metrics(task),
        "train_timing": paths.train_timing(task),
        "data_summary": paths.data_summary(task),
        "samples": paths.samples(task),
        "maps": paths.maps(task),
        "faithfulness": paths.faithfulness(task),
        "curves": paths.perturbation_curves(task),
        "agreement": paths.method_agreement(task),
        "cost": paths.method_cost(task),
    }


class MissingInputs(ArtifactError):
    """The report stage lacks inputs: nothing is written; the message names them in one line."""


def optional_groups(paths: StudyPaths) -> dict[str, list[Path]]:
    """The report's optional parts, each whole or absent: a seed sweep, a recipe sweep, the
    generation study, the pronoun test and the answer attribution (the files each section reads)."""
    return {
        "seed sweep": [paths.sweep, paths.sweep_jobs],
        "recipe sweep": [paths.recipes, paths.recipe_jobs],
        "generation": [paths.generation / "shares.parquet", paths.generation / "faithfulness.parquet",
                       paths.generations / "long.safetensors"],
        "pronouns": [paths.pronouns / f for f in ("summary.json", "sentences.parquet", "scores.parquet",
                                                  "shares.parquet")] + [paths.pronoun_maps],
        "answer attribution": [paths.answer / f for f in ("rows.parquet", "summary.parquet", "summary.json")],
    }  # fmt: skip


def missing_inputs(tasks: Sequence[str], paths: StudyPaths) -> list[Path]:
    """Every input the report stage needs and does not find: each task's stage outputs
    (:func:`input_paths`), and the rest of an optional part (:func:`optional_groups`) of which some
    file is present."""
    wanted = [p for task in tasks for p in input_paths(task, paths).values()]
    for group in optional_groups(paths).values():
        if any(p.is_file() for p in group):
            wanted += group
    return [p for p in wanted if not p.is_file()]


def check_inputs(tasks: Sequence[str], paths: StudyPaths) -> None:
    """Raise :class:`MissingInputs` naming the missing inputs (:func:`missing_inputs`) in one line."""
    missing = missing_inputs(tasks, paths)
    if missing:
        shown = ", ".join(p.as_posix() for p in missing[:4]) + (
            f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        )
        raise MissingInputs(
            f"{missing[0].as_posix()}: report input not found ({len(missing)} missing: {shown}); run the stages "
            "that write them (dvc repro, or dvc pull); the report was left as it was"
        )


@dataclass
class TaskInputs:
    task: str
    table: pd.DataFrame | None = None  # the correlation table (attnflow.metrics.tables)
    train_metrics: dict[str, Any] | None = None
    train_timing: dict[str, Any] | None = None  # wall-clock figures of the training run
    data_summary: dict[str, Any] | None = None
    samples: pd.DataFrame | None = None
    maps: dict[str, list[np.ndarray]] | None = None  # aligned with samples' rows
    faithfulness: pd.DataFrame | None = (
        None  # per (method, layer, metric): mean, CI (attribution.faithfulness)
    )
    curves: pd.DataFrame | None = None  # mean perturbation curves
    agreement: pd.DataFrame | None = None  # Kendall tau / top-k overlap between methods
    cost: pd.DataFrame | None = None  # seconds per sentence of each method, and vs one gradient
    missing: list[str] = field(default_factory=list)  # paths not found
    problems: list[str] = field(default_factory=list)  # files found but unreadable


def _read_maps(path: Path) -> tuple[dict[str, list], Any]:
    from attnflow.explanation_file import study_maps_header

    study_maps_header(path)  # a newer version or another kind: one line naming the file
    return load_ragged(path, with_ids=True)


_READERS = {
    "table": read_parquet,
    "train_metrics": read_json,
    "train_timing": read_json,
    "data_summary": read_json,
    "samples": read_parquet,
    "maps": _read_maps,
    "faithfulness": read_parquet,
    "curves": read_parquet,
    "agreement": read_parquet,
    "cost": read_parquet,
}


def load_task(task: str, paths: StudyPaths) -> TaskInputs:
    """Load what exists; record what does not (``missing``) or cannot be read (``problems``)."""
    got = TaskInputs(task)
    for role, path in input_paths(task, paths).items():
        if not path.is_file():
            got.missing.append(path.as_posix())
            continue
        try:
            setattr(got, role, _READERS[role](path))
        except Exception as exc:  # a corrupt file must not stop the whole report
            got.problems.append(str(exc))
    if got.samples is not None and got.maps is not None:
        maps, ids = got.maps
        try:
            order = align_ids(
                ids, got.samples["sample_id"], what=paths.maps(task).as_posix(), against="the samples"
            )
            got.maps = {k: [v[i] for i in order] for k, v in maps.items()}
        except Exception as exc:
            got.problems.append(f"{exc}; maps not drawn")
            got.maps = None
    elif got.maps is not None:
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
