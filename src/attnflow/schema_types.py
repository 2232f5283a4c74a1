"""The study's config schema as dataclasses: one per config group, every field ``???`` (mandatory) or
a container, its allowed range on the field (``ranged(...)``), and the allowed strings of its switches
in ``CHOICES``. The rules that check a config tree against them live in :mod:`attnflow.schema`, which
re-exports every name here (see its docstring)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from attnflow import options
from attnflow.methods import generation_methods, study_methods
from attnflow.options import (  # the ranges and choices: one place, attnflow.options
    AT_LEAST_0,
    AT_LEAST_1,
    MISSING,
    POSITIVE,
    UNIT,
    Range,
    at_least,
    nonempty,
    ranged,
)

__all__ = [
    "CHOICES",
    "EXPERIMENT_NAME",
    "MISSING",
    "STUDY_NAME",
    "AnswerConfig",
    "AttributionConfig",
    "CaptureConfig",
    "CaptureTaskConfig",
    "CorrelateConfig",
    "DataConfig",
    "ExplainConfig",
    "FaithfulnessConfig",
    "FaithfulnessTaskConfig",
    "GenerateConfig",
    "IncludeCLS",
    "MethodNames",
    "PathsConfig",
    "PronounsConfig",
    "Range",
    "ReportConfig",
    "StudyConfig",
    "TaskConfig",
    "TrackingConfig",
    "TrainConfig",
    "TrainerConfig",
    "ranged",
]


@dataclass
class PathsConfig:
    raw: str = MISSING
    prepared: str = MISSING
    models: str = MISSING
    capture: str = MISSING
    explain: str = MISSING
    attribute: str = MISSING
    reports: str = MISSING


@dataclass
class DataConfig:
    mirrors: list[str] = field(default_factory=list)
    timeout_s: float = ranged(POSITIVE)


@dataclass
class TrainConfig:
    """Optimisation of one task's classifier (``task.<name>.train``)."""

    max_epochs: int = ranged(AT_LEAST_1)
    batch_size: int = ranged(AT_LEAST_1)
    eval_batch_size: int = ranged(AT_LEAST_1)
    lr: float = ranged(Range(POSITIVE.check, "the learning rate must be > 0"))
    weight_decay: float = ranged(AT_LEAST_0)  # AdamW, on matrices only
    warmup_ratio: float = ranged(UNIT)  # linear warm-up over this fraction of all steps, then linear decay
    gradient_clip_val: float = ranged(at_least(0, " (0 = no clipping)"))
    patience: int = ranged(AT_LEAST_1)  # early stopping on val_acc, in epochs
    max_time_minutes: float | None = ranged(
        Range(POSITIVE.check, "must be > 0 or null"), None
    )  # wall-clock cap on fit (None: no cap; results stay reproducible)
    train_subset: int | None = ranged(
        at_least(1, " or null"), None
    )  # a seeded random subset of the training rows (None: all)
    val_size: int | None = ranged(
        at_least(1, " or null"), None
    )  # carve this many train rows out for validation (None: the val split)
    max_length: int | None = ranged(
        at_least(2, " (CLS and a token) or null"), None
    )  # truncate inputs to this many tokens (None: no truncation)
    length_bucketing: bool = MISSING
    resume: bool = MISSING  # continue an interrupted run of the same config and code
    teacher: str = MISSING  # none | lstm: online distillation from a teacher trained alongside
    distill_rate: float = ranged(UNIT)  # student loss = rate * distillation + (1 - rate) * gold cross-entropy
    distill_temperature: float = ranged(POSITIVE)


@dataclass
class TrainerConfig:
    """Hardware knobs, once for every task (``conf/trainer/``)."""

    accelerator: str = MISSING  # Lightning: auto | cpu | gpu
    devices: Any = MISSING
    strategy: str = MISSING
    precision: str = MISSING  # auto: bf16-mixed on a bf16-capable GPU, else 32-true
    deterministic: bool = MISSING
    num_workers: int = ranged(AT_LEAST_0)
    log_every_n_steps: int = ranged(AT_LEAST_1)
    progress_bar: bool = MISSING
    device: str = MISSING  # capture / attribute: auto (cuda when present) | cpu | cuda | cuda:N
    num_threads: int = ranged(AT_LEAST_1)  # torch CPU threads while training: the weights depend on it


@dataclass
class CaptureTaskConfig:
    split: str = MISSING
    n_samples: int = ranged(AT_LEAST_1)
    select: str = MISSING  # first (the authors' first n in file order) | random (seeded)


@dataclass
class FaithfulnessTaskConfig:
    n_samples: int = ranged(AT_LEAST_1)  # captured samples perturbed (a seeded subset; all when larger)


@dataclass
class TaskConfig:
    """``task.<name>``: everything the study sets per task (``conf/task/<name>.yaml``)."""

    data: Any = MISSING  # typed by TaskSpec.data_config
    model: Any = MISSING  # typed by TaskSpec.model_config
    train: TrainConfig = field(default_factory=TrainConfig)
    capture: CaptureTaskConfig = field(default_factory=CaptureTaskConfig)
    faithfulness: FaithfulnessTaskConfig = field(default_factory=FaithfulnessTaskConfig)
    rows: str = MISSING  # which row of each layer's map explains the input
    gradient_target: str = MISSING
    gradient_class: str = MISSING


@dataclass
class CaptureConfig:
    dtype: str = MISSING
    batch_size: int = ranged(AT_LEAST_1)
    max_length: int = ranged(at_least(2, " (CLS and a token)"))
    target: str = MISSING  # the class the class-specific explainers explain: predicted | gold | an index


@dataclass
class ExplainConfig:
    methods: list[str] = ranged(nonempty("name at least one method"), factory=list)
    residual: float = ranged(UNIT)
    heads: str = MISSING
    per_head: bool = MISSING
    per_head_samples: int | None = ranged(at_least(1, " or null"), None)  # seeded subset (None: all)
    cls_self: str = MISSING  # class-specific maps' CLS-to-CLS entry: authors | keep | min | zero


@dataclass
class AttributionConfig:
    methods: list[str] = ranged(nonempty("name at least one importance score"), factory=list)
    blank_positions: str = MISSING  # all (CLS blanked too) | skip_cls
    blank_token: str = MISSING
    mask_blank: bool = MISSING
    blank_target: str = MISSING
    blank_score: str = MISSING
    gradient_reduction: str = MISSING
    batch_size: int = ranged(AT_LEAST_1)
    switch_samples: int | None = ranged(at_least(1, " or null"), None)  # seeded subset (None: all)


@dataclass
class IncludeCLS:
    blank_out: bool = MISSING
    input_gradients: bool = MISSING


@dataclass
class CorrelateConfig:
    spearman: str = MISSING
    undefined: str = MISSING
    include_cls: IncludeCLS = field(default_factory=IncludeCLS)
    n_boot: int = ranged(AT_LEAST_0)
    ci: float = ranged(Range(lambda x: 0 < x < 1, "must lie in (0, 1)"))


@dataclass
class FaithfulnessConfig:
    """``faithfulness``: perturbation tests of every method (the samples: task.<name>.faithfulness)."""

    layers: list[int] = ranged(
        Range(lambda x: x >= 1, "layers are 1-based"), factory=list, each=True
    )  # 1-based; empty: every layer; the last is always in
    removal: str = MISSING  # delete | pad | unk | mask
    top_k: int = ranged(AT_LEAST_1)  # agreement between methods: top-k overlap size
    batch_size: int = ranged(AT_LEAST_1)
    n_boot: int = ranged(AT_LEAST_0)


@dataclass
class GenerateConfig:
    """``generate``: the generation study on the packaged small LM."""

    max_new_tokens: int = ranged(AT_LEAST_1)
    methods: list[str] = ranged(nonempty("name at least one method"), factory=list)
    sinks: list[str] = field(default_factory=list)
    receptive_fields: list[str] = field(default_factory=list)
    ks: list[int] = ranged(AT_LEAST_1, factory=list, each=True)
    n_random: int = ranged(AT_LEAST_1)
    prompts: dict[str, str] = ranged(nonempty("give at least one prompt"), factory=dict)


@dataclass
class PronounsConfig:
    """``pronouns``: the paper's Figure 4 (which antecedent of a pronoun each method points to), as an
    analogue on the packaged causal LM (attnflow.pronouns)."""

    n_sentences: int = ranged(AT_LEAST_1)
    methods: list[str] = ranged(nonempty("name at least one method"), factory=list)
    reduce: str = MISSING  # how an antecedent of several tokens is scored: max | sum over its tokens
    prefix: str = MISSING  # put before every sentence (the BOS token), never scored
    ig_steps: int = ranged(AT_LEAST_1)
    batch_size: int = ranged(AT_LEAST_1)
    n_boot: int = ranged(AT_LEAST_0)
    figure: list[str] = field(default_factory=list)  # the families whose first sentence the report draws


@dataclass
class AnswerConfig:
    """``answer``: generated answers attributed to their prompts, side by side with FlashTrace, on the
    packaged causal LM (attnflow.answer): items with known sources, RISE, MAS and recovery@10 %."""

    tasks: list[str] = ranged(nonempty("name at least one task"), factory=list)
    lengths: list[int] = ranged(AT_LEAST_1, factory=list, each=True)  # retrieval prompts' tokens
    n_items: int = ranged(AT_LEAST_1)  # built per task (and length); scored: those answered right
    methods: list[str] = ranged(nonempty("name at least one method"), factory=list)
    reference: str = MISSING  # the tool every other is paired with, item by item
    ig_steps: int = ranged(AT_LEAST_1)
    full_curve: int = ranged(AT_LEAST_1)  # every deletion count up to this many user tokens
    steps: int = ranged(AT_LEAST_1)  # else this many + 1 counts, interpolated
    n_boot: int = ranged(AT_LEAST_1)


@dataclass
class ReportConfig:
    n_examples: int = ranged(AT_LEAST_0)
    examples: list[str] = field(default_factory=list)
    allow_mixed_code: bool = MISSING  # pool sweep seeds run by other code than this run (named in the report)


def _is_name(text: Any) -> bool:
    """A name that can be a folder name and an MLflow experiment name on every system: letters,
    digits, ``_ - . +``, starting with a letter or digit (no path separator, no control character,
    no space: one path component that needs no quoting)."""
    return isinstance(text, str) and re.fullmatch(r"[^\W_][\w.+-]*", text) is not None and len(text) <= 200


def _is_printable_name(text: Any) -> bool:
    """Text with no control character (a newline, a tab, ESC) and not only spaces."""
    return isinstance(text, str) and text.strip() != "" and text.isprintable()


# ``study`` names folders (multirun/<study>/, reports) and, by default, the MLflow experiment.
STUDY_NAME = Range(
    _is_name,
    "must be a name of letters, digits, '_', '-', '.' and '+' that starts with a letter or digit "
    "(it names a folder and the MLflow experiment; no path separator, space or control character)",
)
EXPERIMENT_NAME = Range(
    _is_printable_name, "must be printable text (no newline, tab or other control character)"
)


@dataclass
class TrackingConfig:
    uri: str = MISSING
    experiment: str = ranged(EXPERIMENT_NAME)
    enabled: bool = MISSING


@dataclass
class StudyConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    data: DataConfig = field(default_factory=DataConfig)
    task: dict[str, TaskConfig] = field(default_factory=dict)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    explain: ExplainConfig = field(default_factory=ExplainConfig)
    attribution: AttributionConfig = field(default_factory=AttributionConfig)
    correlate: CorrelateConfig = field(default_factory=CorrelateConfig)
    faithfulness: FaithfulnessConfig = field(default_factory=FaithfulnessConfig)
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    pronouns: PronounsConfig = field(default_factory=PronounsConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    study: str = ranged(STUDY_NAME)
    seed: int = ranged(AT_LEAST_0)
    tasks: list[str] = field(default_factory=list)


class MethodNames(Sequence):
    """The names of the method records a view returns (`attnflow.methods.study_methods`, ...), read
    when asked: a method registered after import (a plugin, `attnflow.methods.register`) is a
    choice of the config too."""

    def __init__(self, view: Callable[[], list[Any]]) -> None:
        self._view = view

    def _names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self._view())

    def __getitem__(self, i: Any) -> Any:
        return self._names()[i]

    def __iter__(self) -> Any:  # one read of the records per pass (Sequence's would read them per item)
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


# Allowed values of string switches, by dotted key ("*" stands for any key at that level).
# Task names and capture splits come from attnflow.tasks.TASKS.
CHOICES: dict[str, tuple[str, ...]] = {
    "explain.methods": MethodNames(study_methods),
    "capture.dtype": options.CAPTURE_DTYPES,
    "explain.heads": options.HEAD_AGGREGATIONS,
    "explain.cls_self": options.CLS_SELF_CHOICES,
    "task.*.rows": options.ROW_CHOICES,
    "attribution.methods": options.ATTRIBUTION_METHODS,
    "attribution.blank_positions": options.BLANK_POSITIONS,
    "attribution.blank_token": options.BLANK_TOKENS,
    "task.*.capture.select": options.CAPTURE_SELECTIONS,
    "attribution.blank_target": options.BLANK_TARGETS,
    "attribution.blank_score": options.BLANK_SCORES,
    "task.*.gradient_target": options.GRADIENT_TARGETS,
    "task.*.train.teacher": options.TEACHERS,
    "task.*.data.source": options.DATA_SOURCES,
    "attribution.gradient_reduction": options.GRADIENT_REDUCTIONS,
    "correlate.spearman": options.SPEARMAN_METHODS,
    "correlate.undefined": options.UNDEFINED,
    "faithfulness.removal": options.REMOVALS,
    "generate.methods": MethodNames(generation_methods),
    "generate.sinks": options.SINK_CHOICES,
    "generate.receptive_fields": options.RECEPTIVE_FIELDS,
    "pronouns.methods": options.PRONOUN_METHODS,
    "pronouns.reduce": options.ANTECEDENT_REDUCTIONS,
    "answer.tasks": options.ANSWER_TASKS,
    "answer.methods": options.ANSWER_TOOLS,
    "answer.reference": options.ANSWER_TOOLS,
}
