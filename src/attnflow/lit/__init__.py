"""Lightning wrappers: a DataModule over the prepared splits, a LightningModule around any
attnflow classifier (composition), and :func:`train_task`, what the ``train`` stage calls."""

from attnflow.lit.callbacks import NonFiniteError
from attnflow.lit.data import EpochShuffleSampler, TextClassificationDataModule
from attnflow.lit.module import ClassifierModule
from attnflow.lit.train import evaluate, settings, train_task

__all__ = [
    "ClassifierModule",
    "EpochShuffleSampler",
    "NonFiniteError",
    "TextClassificationDataModule",
    "evaluate",
    "settings",
    "train_task",
]
