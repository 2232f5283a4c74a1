"""The study's on-disk layout, declared once: stage folders come from ``conf/paths``, file names here.

Stages, the report, the notebook and the tests all ask :class:`StudyPaths` where a file is;
``dvc.yaml`` names the same stage folders through ``${paths.<stage>}``.

>>> p = StudyPaths.from_config({"raw": "data/raw", "prepared": "data/prepared", "models": "models",
...     "capture": "outputs/capture", "explain": "outputs/explain", "attribute": "outputs/attribute",
...     "reports": "reports"})
>>> p.samples("agreement").as_posix(), p.model("sst2").as_posix()
('outputs/capture/agreement/samples.parquet', 'models/sst2/model')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath
from typing import Any

__all__ = ["StudyPaths", "UnsafeName", "inside"]


_AGGREGATE_KEY = "hydra.callbacks.aggregate.into"  # the sweep's aggregate folder (pipelines.study)


class UnsafeName(ValueError):
    """A config value that names a file or folder would lead outside its folder."""


def inside(folder: str | Path, name: str, *, key: str) -> Path:
    """``folder / name``, refused unless ``name`` is a relative path that stays below ``folder``.

    Every config value that becomes part of a path (a study name, a task, an aggregate folder)
    goes through here, so ``study=../../x`` cannot write outside ``multirun/``. The check is on the
    text (no symlink resolution): ``..``, an absolute path, a drive, an empty name and ``.`` are
    refused, the message naming the config ``key``.

    >>> inside("reports", "sweep", key="into").as_posix()
    'reports/sweep'
    >>> inside("reports", "../../escaped", key="hydra.callbacks.aggregate.into")
    Traceback (most recent call last):
    attnflow.paths.UnsafeName: hydra.callbacks.aggregate.into='../../escaped' must name a folder inside reports/ (no '..', no absolute path)
    """
    text = str(name)
    parts = [PurePosixPath(text), PureWindowsPath(text)]  # a backslash or drive is refused everywhere
    if (
        not text.strip()
        or "\x00" in text
        or any(p.is_absolute() or p.anchor or ".." in p.parts for p in parts)
        or all(part == "." for part in PurePosixPath(text).parts)
    ):
        shown = PurePath(folder).as_posix()
        raise UnsafeName(f"{key}={text!r} must name a folder inside {shown}/ (no '..', no absolute path)")
    return Path(folder) / text


@dataclass(frozen=True)
class StudyPaths:
    raw: Path
    prepared: Path
    models: Path
    capture: Path
    explain: Path
    attribute: Path
    reports: Path

    @classmethod
    def from_config(cls, paths: Mapping[str, Any], root: str | Path = ".") -> StudyPaths:
        """From the ``paths`` config node (relative paths are taken from ``root``)."""
        return cls(**{f.name: Path(root) / str(paths[f.name]) for f in fields(cls)})

    # download / prepare / train
    def raw_data(self, task: str) -> Path:
        return inside(self.raw, task, key="tasks")

    def prepared_data(self, task: str) -> Path:
        return inside(self.prepared, task, key="tasks")

    def model_dir(self, task: str) -> Path:
        """Checkpoints (best.ckpt, last.ckpt), metrics.json, curve.* of the train stage."""
        return inside(self.models, task, key="tasks")

    def model(self, task: str) -> Path:
        """The exported, pickle-free model folder that later stages load."""
        return self.model_dir(task) / "model"

    # capture / explain / attribute
    def samples(self, task: str) -> Path:
        return inside(self.capture, task, key="tasks") / "samples.parquet"

    def attentions(self, task: str) -> Path:
        return inside(self.capture, task, key="tasks") / "attentions.safetensors"

    def relevance(self, task: str) -> Path:
        """Attention gradients and LRP relevance for the class-specific explainers (when asked for)."""
        return inside(self.capture, task, key="tasks") / "relevance.safetensors"

    def maps(self, task: str) -> Path:
        return inside(self.explain, task, key="tasks") / "maps.safetensors"

    def head_maps(self, task: str) -> Path:
        """The per-head maps (``explain.per_head``), of the samples ``explain.per_head_samples`` chose."""
        return inside(self.explain, task, key="tasks") / "heads.safetensors"

    def importance(self, task: str) -> Path:
        return inside(self.attribute, task, key="tasks") / "importance.safetensors"

    def switched_importance(self, task: str) -> Path:
        """Blank-out under each attribution switch flipped alone (the report's sensitivity table)."""
        return inside(self.attribute, task, key="tasks") / "switches.safetensors"

    # reports (tracked by git)
    def task_reports(self, task: str) -> Path:
        return inside(self.reports, task, key="tasks")

    def data_summary(self, task: str) -> Path:
        return self.task_reports(task) / "data_summary.json"

    def train_metrics(self, task: str) -> Path:
        return self.task_reports(task) / "train_metrics.json"

    def train_timing(self, task: str) -> Path:
        """The training run's wall-clock figures: apart from the metrics, which repeat exactly."""
        return self.task_reports(task) / "train_timing.json"

    def correlations(self, task: str) -> Path:
        """The results contract: one tidy row per (importance, method, head, layer, variant)."""
        return self.task_reports(task) / "correlations.parquet"

    def sentence_correlations(self, task: str) -> Path:
        """The configured all-heads correlations per sentence (and each row's entropy): what the
        claims ledger resamples."""
        return self.task_reports(task) / "sentences.parquet"

    def correlations_metrics(self, task: str) -> Path:
        """The configured variant's means as DVC metrics (derived from the table)."""
        return self.task_reports(task) / "correlations.json"

    def curves(self, task: str) -> Path:
        return self.task_reports(task) / "curves"

    def faithfulness(self, task: str) -> Path:
        """Faithfulness scores: one tidy row per (method, layer, metric)."""
        return self.task_reports(task) / "faithfulness.parquet"

    def perturbation_curves(self, task: str) -> Path:
        return self.task_reports(task) / "perturbation_curves.parquet"

    def method_agreement(self, task: str) -> Path:
        """Kendall tau and top-k overlap between every pair of methods, per layer."""
        return self.task_reports(task) / "method_agreement.parquet"

    def faithfulness_curves(self, task: str) -> Path:
        """One CSV per perturbation protocol, a column per method (``dvc plots``)."""
        return self.task_reports(task) / "faithfulness_curves"

    def method_cost(self, task: str) -> Path:
        """Seconds per sentence of every method of the faithfulness table, and vs one gradient."""
        return self.task_reports(task) / "method_cost.parquet"

    def faithfulness_metrics(self, task: str) -> Path:
        return self.task_reports(task) / "faithfulness.json"

    @property
    def language_model(self) -> Path:
        """The converted decoder-only LM of the generation study (safetensors + tokenizer)."""
        return self.models / "lm"

    @property
    def generation(self) -> Path:
        """The generation study's tables (shares.parquet, faithfulness.parquet, summary.json)."""
        return self.reports / "generation"

    @property
    def generations(self) -> Path:
        """Every explained generation (M per method and option), for figures and scripts."""
        return self.explain / "generation"

    @property
    def pronouns(self) -> Path:
        """The pronoun test's tables (sentences, scores, shares .parquet; summary.json)."""
        return self.reports / "pronouns"

    @property
    def pronoun_maps(self) -> Path:
        """The pronoun test's maps [layer, token] per method, one per sentence (attnflow.io ragged, by sentence_id)."""
        return self.explain / "pronouns" / "maps.safetensors"

    @property
    def answer(self) -> Path:
        """The answer-attribution comparison's tables (rows.parquet: one per item and tool;
        summary.parquet: per task, length and tool; summary.json)."""
        return self.reports / "answer"

    @property
    def stage_times(self) -> Path:
        """Each stage's wall-clock seconds and commit in the last ``dvc repro`` (``pipelines.stage_times``)."""
        return self.reports / "stage_times.csv"

    def sweep_table(self, name: str = "sweep") -> Path:
        """A sweep's finished jobs' correlation tables, stacked (``pipelines.study``); ``name`` is
        the sweep's aggregate folder: ``sweep`` (seeds) or ``recipes`` (recipe choices)."""
        return inside(self.reports, name, key=_AGGREGATE_KEY) / "correlations.csv"

    def sweep_faithfulness(self, name: str = "sweep") -> Path:
        """A sweep's finished jobs' faithfulness tables, stacked, with their ``seed`` and ``job``."""
        return inside(self.reports, name, key=_AGGREGATE_KEY) / "faithfulness.csv"

    def sweep_sentences(self, name: str = "sweep") -> Path:
        """A sweep's finished jobs' per-sentence correlations (``sentences.parquet``), stacked, with ``seed``."""
        return inside(self.reports, name, key=_AGGREGATE_KEY) / "sentences.parquet"

    def sweep_jobs_file(self, name: str = "sweep") -> Path:
        """Every job of a sweep: seed, overrides, status, error, each task's accuracy."""
        return inside(self.reports, name, key=_AGGREGATE_KEY) / "jobs.json"

    @property
    def sweep(self) -> Path:
        return self.sweep_table("sweep")

    @property
    def sweep_jobs(self) -> Path:
        return self.sweep_jobs_file("sweep")

    @property
    def recipes(self) -> Path:
        return self.sweep_table("recipes")

    @property
    def recipe_jobs(self) -> Path:
        return self.sweep_jobs_file("recipes")
