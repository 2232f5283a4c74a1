"""The verb-number (subject-verb agreement) task of Linzen et al. (2016): Tables 1-2 of the paper.

Input: a sentence prefix up to (not including) the verb, ``<cls>`` first; label 0 = VBZ
(singular), 1 = VBP (plural). Model: the 6-layer bidirectional GPT-2-type encoder of
:mod:`attnflow.models.agreement`, trained from scratch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnflow.data.download import DatasetSpec, FileSpec
from attnflow.tasks.spec import TaskSpec

__all__ = ["AGREEMENT", "AgreementDataConfig", "AgreementModelConfig", "SplitConfig"]

MISSING: Any = "???"  # set by conf/task/agreement.yaml

_LINZEN = "rnn_agr_simple.tar.gz"
_LINZEN_TSV = "agr_50_mostcommon_10K.tsv.gz"

DATASET = DatasetSpec(
    name="agreement",
    root="linzen2016",
    files=(
        # The official 9/1/90 split; the offline mirror lacks train, test and test.0.
        FileSpec("linzen2016/rnn_agr_simple/numpred.train", _LINZEN, required=False),
        FileSpec("linzen2016/rnn_agr_simple/numpred.val", _LINZEN, aliases=("numpred.valid",)),
        FileSpec("linzen2016/rnn_agr_simple/numpred.test", _LINZEN, required=False),
        FileSpec("linzen2016/rnn_agr_simple/numpred.test.0", _LINZEN, required=False),
        *(FileSpec(f"linzen2016/rnn_agr_simple/numpred.test.{k}", _LINZEN) for k in range(1, 6)),
        FileSpec("linzen2016/rnn_agr_simple/README.txt", _LINZEN, required=False),
        FileSpec("linzen2016/agr_50_mostcommon_10K.tsv", _LINZEN_TSV, required=False),
    ),
)


@dataclass
class SplitConfig:
    train: float = MISSING
    val: float = MISSING
    test: float = MISSING


@dataclass
class AgreementDataConfig:
    urls: list[str] = field(default_factory=list)
    fetch_full_tsv: bool = MISSING  # the full TSV is hundreds of MB
    split: SplitConfig = field(default_factory=SplitConfig)
    dedupe: bool = MISSING
    min_count: int = MISSING


@dataclass
class AgreementModelConfig:
    """The ``task.agreement.model`` block: the fields of :class:`AgreementConfig` the study sets
    (vocab_size and pad_id come from the prepared vocabulary)."""

    n_layer: int = MISSING
    n_head: int = MISSING
    n_embd: int = MISSING
    dropout: float = MISSING
    block_size: int = MISSING


def _prepare(raw: Path, out: Path, data: Any, seed: int) -> dict:
    from attnflow.data.linzen import SplitFractions, prepare_agreement

    return prepare_agreement(
        raw,
        out,
        fractions=SplitFractions(**dict(data.split)),
        seed=seed,
        dedupe=data.dedupe,
        min_count=data.min_count,
    )


def _build_model(model: Any, data_dir: Path) -> tuple[Any, Any]:
    from attnflow.data.vocab import Vocab
    from attnflow.models import AgreementConfig, AgreementTransformer, WordEncoder

    vocab = Vocab.load(Path(data_dir) / "vocab.json")
    settings = asdict(model) if hasattr(model, "__dataclass_fields__") else dict(model)
    config = AgreementConfig(vocab_size=len(vocab), pad_id=vocab.pad_id, **settings)
    return AgreementTransformer(config), WordEncoder(vocab, max_length=config.block_size)


def _wants(data: Any, file: FileSpec) -> bool:
    return data.fetch_full_tsv or not file.relpath.endswith(".tsv")


AGREEMENT = TaskSpec(
    name="agreement",
    dataset=DATASET,
    data_config=AgreementDataConfig,
    model_config=AgreementModelConfig,
    prepare=_prepare,
    build_model=_build_model,
    splits=("train", "val", "test"),
    train_split="train",
    val_split="val",
    eval_split="test",
    labels=("singular", "plural"),
    data_files=("train.parquet", "val.parquet", "test.parquet", "vocab.json"),
    wants=_wants,
)
