"""GLUE SST-2 sentiment (Table 3 of the paper): a pretrained BERT-family encoder, fine-tuned.

Labelled train and dev; the GLUE test split's labels are hidden (label -1, never scored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnflow.data.download import DatasetSpec, FileSpec
from attnflow.tasks.spec import TaskSpec

__all__ = ["SST2", "HFModelConfig", "SST2DataConfig"]

MISSING: Any = "???"  # set by conf/task/sst2.yaml

DATASET = DatasetSpec(
    name="sst2",
    root="sst2",
    files=tuple(FileSpec(f"sst2/glue_SST-2/{n}.tsv", "SST-2.zip") for n in ("train", "dev", "test")),
)


@dataclass
class SST2DataConfig:
    urls: list[str] = field(default_factory=list)


@dataclass
class HFModelConfig:
    pretrained: str = MISSING  # "minilm" (packaged offline), a hub name or a local folder
    finetune: bool | None = None  # None: train unless the checkpoint already is a 2-label classifier
    freeze_embeddings: bool = MISSING


def _prepare(raw: Path, out: Path, data: Any, seed: int) -> dict:
    from attnflow.data.sst2 import prepare_sst2

    return prepare_sst2(raw, out)


def _build_model(model: Any, data_dir: Path) -> tuple[Any, Any]:
    from attnflow.models import HFClassifier, HFEncoder, load_pretrained_tokenizer

    classifier = HFClassifier.from_pretrained(model.pretrained, num_labels=2)
    if model.freeze_embeddings:
        classifier.get_input_embeddings().weight.requires_grad_(False)
    return classifier, HFEncoder(load_pretrained_tokenizer(model.pretrained))


SST2 = TaskSpec(
    name="sst2",
    dataset=DATASET,
    data_config=SST2DataConfig,
    model_config=HFModelConfig,
    prepare=_prepare,
    build_model=_build_model,
    splits=("train", "dev", "test"),
    train_split="train",
    val_split=None,
    eval_split="dev",
    labels=("negative", "positive"),
    data_files=("train.parquet", "dev.parquet"),
    special_positions=(0, -1),  # [CLS] ... [SEP]
)
