"""What the study needs to know about one task, in one place (:class:`TaskSpec`).

A task is a data set plus a classifier: how to download and prepare the data, which model to build
and how to read its classes. Its settings (data source, model size, training, samples, explanation
rows, gradient target) are the config node ``task.<name>`` (``conf/task/<name>.yaml``); the types
of its ``data`` and ``model`` blocks are the dataclasses named here. Adding a task means one module
in ``attnflow/tasks/``, one entry in :data:`attnflow.tasks.TASKS` and one ``conf/task/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnflow.data.download import DatasetSpec, FileSpec

__all__ = ["TaskSpec"]


@dataclass(frozen=True)
class TaskSpec:
    """One task of the study.

    ``prepare(raw_dir, out_dir, data_cfg, seed) -> summary`` writes ``<split>.parquet`` files
    (columns ``text``, ``label``, more allowed) into ``out_dir``; ``build_model(model_cfg,
    data_dir) -> (model, encoder)`` builds a fresh or pretrained classifier with the
    ``attnflow.models`` interface. ``data_config`` / ``model_config`` are the dataclasses that type
    the ``task.<name>.data`` / ``.model`` config blocks (library code, no Hydra).
    """

    name: str
    dataset: DatasetSpec  # files to download, with their archives and mirror paths
    data_config: type
    model_config: type
    prepare: Callable[[Path, Path, Any, int], dict]
    build_model: Callable[[Any, Path], tuple[Any, Any]]
    splits: tuple[str, ...]  # the prepared splits, by name
    train_split: str
    val_split: str | None  # None: carved out of train (task.<name>.train.val_size)
    eval_split: str  # the split train_metrics.json reports accuracy on
    labels: tuple[str, ...]  # class names by index
    data_files: tuple[str, ...]  # prepared files a training run depends on (resume fingerprint)
    extra_eval_splits: tuple[str, ...] = ()  # evaluation-only splits also scored after training
    special_positions: tuple[int, ...] = (0,)  # never perturbed: CLS (0) and, for BERT inputs, SEP (-1)
    wants: Callable[[Any, FileSpec], bool] = lambda data, file: True  # optional files to fetch
    build_teacher: Callable[[Any, Path], Any] | None = None  # (model_cfg, data_dir) -> teacher, if any

    def split_file(self, data_dir: Path, split: str) -> Path:
        if split not in self.splits:
            raise ValueError(f"task {self.name!r} has no split {split!r}; splits: {', '.join(self.splits)}")
        return Path(data_dir) / f"{split}.parquet"
