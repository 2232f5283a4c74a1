"""Lightning wrappers: a DataModule over the prepared splits, a LightningModule around any
attnflow classifier (composition), and :func:`train_task`, what the ``train`` stage calls."""

from attnflow.lit.config import (
    MODEL_CONFIGS,
    TRAIN_CONFIGS,
    AgreementModelConfig,
    AgreementTrainConfig,
    SST2ModelConfig,
    SST2TrainConfig,
    TrainConfig,
    from_dict,
)
from attnflow.lit.data import EpochShuffleSampler, TextClassificationDataModule
from attnflow.lit.module import ClassifierModule
from attnflow.lit.train import TASKS, build_model, evaluate, train_task

__all__ = [
    "MODEL_CONFIGS",
    "TASKS",
    "TRAIN_CONFIGS",
    "AgreementModelConfig",
    "AgreementTrainConfig",
    "ClassifierModule",
    "EpochShuffleSampler",
    "SST2ModelConfig",
    "SST2TrainConfig",
    "TextClassificationDataModule",
    "TrainConfig",
    "build_model",
    "evaluate",
    "from_dict",
    "train_task",
]
