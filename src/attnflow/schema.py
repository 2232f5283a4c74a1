"""The study's config schema: one dataclass per group of ``conf/``, types only.

The values live in ``conf/`` (one fact in one place): every field here is ``???`` (mandatory) or
a container, so a key missing from the YAML fails at start instead of taking a silent default.
Plain dataclasses, so the library depends on neither Hydra nor Lightning; ``pipelines/_config.py``
merges the composed config into them with OmegaConf (an unknown key or a wrongly typed value fails
at start with the key's name), then checks each task's ``data`` / ``model`` blocks against the
dataclasses of its :class:`attnflow.tasks.TaskSpec`, the choices below and the value ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnflow.methods import generation_methods, study_methods

MISSING: Any = "???"

__all__ = [
    "CHOICES",
    "MISSING",
    "CaptureTaskConfig",
    "StudyConfig",
    "TaskConfig",
    "TrainConfig",
    "TrainerConfig",
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
    timeout_s: float = MISSING


@dataclass
class TrainConfig:
    """Optimisation of one task's classifier (``task.<name>.train``)."""

    max_epochs: int = MISSING
    batch_size: int = MISSING
    eval_batch_size: int = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING  # AdamW, on matrices only
    warmup_ratio: float = MISSING  # linear warm-up over this fraction of all steps, then linear decay
    gradient_clip_val: float = MISSING
    patience: int = MISSING  # early stopping on val_acc, in epochs
    max_time_minutes: float | None = None  # wall-clock cap on fit (None: no cap; results stay reproducible)
    train_subset: int | None = None  # a seeded random subset of the training rows (None: all)
    val_size: int | None = None  # carve this many train rows out for validation (None: the val split)
    max_length: int | None = None  # truncate inputs to this many tokens (None: no truncation)
    length_bucketing: bool = MISSING
    resume: bool = MISSING  # continue an interrupted run of the same config and code
    teacher: str = MISSING  # none | lstm: online distillation from a teacher trained alongside
    distill_rate: float = MISSING  # student loss = rate * distillation + (1 - rate) * gold cross-entropy
    distill_temperature: float = MISSING


@dataclass
class TrainerConfig:
    """Hardware knobs, once for every task (``conf/trainer/``)."""

    accelerator: str = MISSING  # Lightning: auto | cpu | gpu
    devices: Any = MISSING
    strategy: str = MISSING
    precision: str = MISSING  # auto: bf16-mixed on a bf16-capable GPU, else 32-true
    deterministic: bool = MISSING
    num_workers: int = MISSING
    log_every_n_steps: int = MISSING
    progress_bar: bool = MISSING
    device: str = MISSING  # capture / attribute: auto (cuda when present) | cpu | cuda | cuda:N


@dataclass
class CaptureTaskConfig:
    split: str = MISSING
    n_samples: int = MISSING
    select: str = MISSING  # first (the authors' first n in file order) | random (seeded)


@dataclass
class FaithfulnessTaskConfig:
    n_samples: int = MISSING  # captured samples perturbed (a seeded subset; all when larger)


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
    batch_size: int = MISSING
    max_length: int = MISSING
    target: str = MISSING  # the class the class-specific explainers explain: predicted | gold | an index


@dataclass
class ExplainConfig:
    methods: list[str] = field(default_factory=list)
    residual: float = MISSING
    heads: str = MISSING
    per_head: bool = MISSING
    cls_self: str = MISSING  # class-specific maps' CLS-to-CLS entry: authors | keep | min | zero


@dataclass
class AttributionConfig:
    methods: list[str] = field(default_factory=list)
    blank_positions: str = MISSING  # all (CLS blanked too) | skip_cls
    blank_token: str = MISSING
    mask_blank: bool = MISSING
    blank_target: str = MISSING
    blank_score: str = MISSING
    gradient_reduction: str = MISSING
    batch_size: int = MISSING


@dataclass
class IncludeCLS:
    blank_out: bool = MISSING
    input_gradients: bool = MISSING


@dataclass
class CorrelateConfig:
    spearman: str = MISSING
    undefined: str = MISSING
    include_cls: IncludeCLS = field(default_factory=IncludeCLS)
    n_boot: int = MISSING
    ci: float = MISSING


@dataclass
class FaithfulnessConfig:
    """``faithfulness``: perturbation tests of every method (the samples: task.<name>.faithfulness)."""

    layers: list[int] = field(default_factory=list)  # 1-based; empty: every layer; the last is always in
    removal: str = MISSING  # delete | pad | unk | mask
    top_k: int = MISSING  # agreement between methods: top-k overlap size
    batch_size: int = MISSING
    n_boot: int = MISSING


@dataclass
class GenerateConfig:
    """``generate``: the generation study on the packaged small LM."""

    max_new_tokens: int = MISSING
    methods: list[str] = field(default_factory=list)
    sinks: list[str] = field(default_factory=list)
    receptive_fields: list[str] = field(default_factory=list)
    ks: list[int] = field(default_factory=list)
    n_random: int = MISSING
    prompts: dict[str, str] = field(default_factory=dict)


@dataclass
class ReportConfig:
    n_examples: int = MISSING
    examples: list[str] = field(default_factory=list)


@dataclass
class TrackingConfig:
    uri: str = MISSING
    experiment: str = MISSING
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
    report: ReportConfig = field(default_factory=ReportConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    study: str = MISSING
    seed: int = MISSING
    tasks: list[str] = field(default_factory=list)


# Allowed values of string switches, by dotted key ("*" stands for any key at that level).
# Task names and capture splits come from attnflow.tasks.TASKS.
CHOICES: dict[str, tuple[str, ...]] = {
    "explain.methods": tuple(r.name for r in study_methods()),
    "capture.dtype": ("float16", "float32"),
    "explain.heads": ("mean", "sum", "max"),
    "explain.cls_self": ("authors", "keep", "min", "zero"),
    "task.*.rows": ("cls", "max", "mean"),
    "attribution.methods": ("blank_out", "input_gradients"),
    "attribution.blank_positions": ("all", "skip_cls"),
    "attribution.blank_token": ("pad", "unk", "mask"),
    "task.*.capture.select": ("first", "random"),
    "attribution.blank_target": ("predicted", "gold"),
    "attribution.blank_score": ("prob", "logit"),
    "task.*.gradient_target": ("p0_minus_p1", "prob", "logit"),
    "task.*.train.teacher": ("none", "lstm"),
    "task.*.data.source": ("natural", "pooled"),
    "attribution.gradient_reduction": ("abs_sum", "l2", "grad_x_input"),
    "correlate.spearman": ("average", "dense_noties"),
    "correlate.undefined": ("zero", "nan"),
    "faithfulness.removal": ("delete", "pad", "unk", "mask"),
    "generate.methods": tuple(r.name for r in generation_methods()),
    "generate.sinks": ("none", "auto", "drop", "diagonal"),
    "generate.receptive_fields": ("none", "uniform", "column"),
}
