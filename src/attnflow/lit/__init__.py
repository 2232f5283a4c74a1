"""Lightning wrappers: a DataModule over the prepared splits, a LightningModule around any
attnflow classifier (composition), and :func:`train_task`, what the ``train`` stage calls.

Names are imported on first use, so ``attnflow.lit.config`` (plain dataclasses, used by the config
schema) loads without importing Lightning.
"""

from importlib import import_module
from typing import Any

_WHERE = {
    "MODEL_CONFIGS": "config",
    "TRAIN_CONFIGS": "config",
    "AgreementModelConfig": "config",
    "AgreementTrainConfig": "config",
    "SST2ModelConfig": "config",
    "SST2TrainConfig": "config",
    "TrainConfig": "config",
    "from_dict": "config",
    "EpochShuffleSampler": "data",
    "TextClassificationDataModule": "data",
    "ClassifierModule": "module",
    "TASKS": "train",
    "build_model": "train",
    "evaluate": "train",
    "train_task": "train",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'attnflow.lit' has no attribute {name!r}")
    value = getattr(import_module(f"attnflow.lit.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
