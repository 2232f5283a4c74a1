"""The verb-number (subject-verb agreement) task of Linzen et al. (2016): Tables 1-2 of the paper.

Input: a sentence prefix up to (not including) the verb, ``<cls>`` first and, with
``task.agreement.model.append_eos`` (the authors'), ``<eos>`` last; label 0 = VBZ
(singular), 1 = VBP (plural). Model: the 6-layer bidirectional GPT-2-type encoder of
:mod:`attnflow.models.agreement`, trained from scratch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnflow.data.download import DatasetSpec, FileSpec
from attnflow.options import AT_LEAST_1, DROPOUT, POSITIVE, at_least, ranged
from attnflow.tasks.spec import TaskSpec

__all__ = ["AGREEMENT", "AgreementDataConfig", "AgreementModelConfig", "SplitConfig", "TeacherConfig"]

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
        # The natural-distribution sample (mirror only; MANIFEST.md says where it comes from)
        *(
            FileSpec(f"linzen2016/edinburgh_nlu_wiki/wiki-{s}.txt", "", required=False)
            for s in ("train", "dev", "test")
        ),
    ),
)


@dataclass
class SplitConfig:
    train: float = MISSING
    val: float = MISSING
    test: float = MISSING


@dataclass
class AgreementDataConfig:
    """``task.agreement.data`` (see :mod:`attnflow.data.linzen` for the two sources)."""

    urls: list[str] = field(default_factory=list)
    fetch_full_tsv: bool = MISSING  # the full TSV is hundreds of MB
    source: str = MISSING  # natural | pooled
    extra_train: list[str] = field(default_factory=list)  # numpred files added to natural training
    split: SplitConfig = field(default_factory=SplitConfig)  # pooled only
    dedupe: bool = MISSING  # pooled only
    min_count: int = ranged(AT_LEAST_1)


@dataclass
class TeacherConfig:
    """The LSTM teacher of online distillation (:class:`attnflow.models.LSTMConfig`)."""

    embedding_dim: int = MISSING
    hidden_size: int = MISSING
    num_layers: int = MISSING
    input_dropout: float = ranged(DROPOUT)
    hidden_dropout: float = ranged(DROPOUT)


@dataclass
class AgreementModelConfig:
    """The ``task.agreement.model`` block: the fields of :class:`AgreementConfig` the study sets
    (vocab_size and pad_id come from the prepared vocabulary), and the teacher's."""

    n_layer: int = ranged(AT_LEAST_1)
    n_head: int = ranged(AT_LEAST_1)
    n_embd: int = MISSING
    embd_pdrop: float = ranged(DROPOUT)
    attn_pdrop: float = ranged(DROPOUT)
    resid_pdrop: float = ranged(DROPOUT)
    initializer_range: float = ranged(POSITIVE)
    block_size: int = ranged(at_least(2))
    append_eos: bool = MISSING  # <eos> after the prefix, where the verb would be (the authors' input)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)


def _prepare(raw: Path, out: Path, data: Any, seed: int) -> dict:
    from attnflow.data.linzen import SplitFractions, prepare_agreement

    return prepare_agreement(
        raw,
        out,
        source=data.source,
        extra_train=list(data.extra_train),
        fractions=SplitFractions(**dict(data.split)),
        seed=seed,
        dedupe=data.dedupe,
        min_count=data.min_count,
    )


def _build_model(model: Any, data_dir: Path) -> tuple[Any, Any]:
    from attnflow.data.vocab import Vocab
    from attnflow.models import AgreementConfig, AgreementTransformer, WordEncoder

    vocab = Vocab.load(Path(data_dir) / "vocab.json")
    settings = {k: v for k, v in asdict(model).items() if k != "teacher"}
    config = AgreementConfig(vocab_size=len(vocab), pad_id=vocab.pad_id, **settings)
    return AgreementTransformer(config), WordEncoder(
        vocab, max_length=config.block_size, append_eos=config.append_eos
    )


def _build_teacher(model: Any, data_dir: Path) -> Any:
    from attnflow.data.vocab import Vocab
    from attnflow.models import LSTMClassifier, LSTMConfig

    vocab = Vocab.load(Path(data_dir) / "vocab.json")
    return LSTMClassifier(LSTMConfig(vocab_size=len(vocab), pad_id=vocab.pad_id, **asdict(model.teacher)))


def _wants(data: Any, file: FileSpec) -> bool:
    if file.relpath.endswith(".tsv"):
        return bool(data.fetch_full_tsv)
    return data.source == "natural" or "edinburgh_nlu_wiki" not in file.relpath


AGREEMENT = TaskSpec(
    name="agreement",
    dataset=DATASET,
    data_config=AgreementDataConfig,
    model_config=AgreementModelConfig,
    prepare=_prepare,
    build_model=_build_model,
    splits=("train", "val", "test", "attractors"),
    train_split="train",
    val_split="val",
    eval_split="test",
    labels=("singular", "plural"),
    data_files=("train.parquet", "val.parquet", "test.parquet", "vocab.json"),
    extra_eval_splits=("attractors",),
    wants=_wants,
    build_teacher=_build_teacher,
)
