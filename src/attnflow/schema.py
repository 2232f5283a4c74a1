"""The study's config schema: one dataclass per group of ``conf/``.

Plain dataclasses, so the library does not depend on Hydra; ``pipelines/_config.py`` merges the
composed config into them with OmegaConf, which makes an unknown key or a wrongly typed value
fail at start with the key's name. ``CHOICES`` lists the values a string switch may take.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnflow.lit.config import AgreementModelConfig, AgreementTrainConfig, SST2ModelConfig, SST2TrainConfig

MISSING = "???"


@dataclass
class PathsConfig:
    raw: str = "data/raw"
    prepared: str = "data/prepared"
    models: str = "models"
    outputs: str = "outputs"
    reports: str = "reports"


@dataclass
class SplitConfig:
    train: float = 0.8
    val: float = 0.1
    test: float = 0.1


@dataclass
class AgreementDataConfig:
    urls: list[str] = field(default_factory=list)
    fetch_full_tsv: bool = False
    split: SplitConfig = field(default_factory=SplitConfig)
    dedupe: bool = True
    min_count: int = 1


@dataclass
class SST2DataConfig:
    urls: list[str] = field(default_factory=list)


@dataclass
class DataConfig:
    mirrors: list[str] = field(default_factory=list)
    timeout_s: float = 5.0
    agreement: AgreementDataConfig = field(default_factory=AgreementDataConfig)
    sst2: SST2DataConfig = field(default_factory=SST2DataConfig)


@dataclass
class CaptureTaskConfig:
    split: str = MISSING
    n_samples: int = MISSING


@dataclass
class CaptureConfig:
    agreement: CaptureTaskConfig = field(default_factory=CaptureTaskConfig)
    sst2: CaptureTaskConfig = field(default_factory=CaptureTaskConfig)
    dtype: str = "float16"
    batch_size: int = 64
    max_length: int = 128


@dataclass
class PerTask:
    agreement: str = MISSING
    sst2: str = MISSING


@dataclass
class ExplainConfig:
    methods: list[str] = field(default_factory=lambda: ["raw", "rollout", "flow"])
    residual: float = 0.5
    heads: str = "mean"
    rows: PerTask = field(default_factory=PerTask)
    per_head: bool = True


@dataclass
class AttributionConfig:
    methods: list[str] = field(default_factory=lambda: ["blank_out", "input_gradients"])
    blank_token: str = "pad"
    mask_blank: bool = True
    blank_target: str = "predicted"
    blank_score: str = "prob"
    gradient_target: PerTask = field(default_factory=PerTask)
    gradient_class: PerTask = field(default_factory=PerTask)
    gradient_reduction: str = "abs_sum"
    batch_size: int = 256


@dataclass
class IncludeCLS:
    blank_out: bool = False
    input_gradients: bool = True


@dataclass
class CorrelateConfig:
    spearman: str = "average"
    undefined: str = "zero"
    include_cls: IncludeCLS = field(default_factory=IncludeCLS)
    n_boot: int = 1000
    ci: float = 0.95


@dataclass
class ReportConfig:
    n_examples: int = 3
    examples: list[str] = field(default_factory=list)


@dataclass
class TrackingConfig:
    uri: str = "sqlite:///mlflow.db"
    experiment: str = MISSING
    enabled: bool = True


@dataclass
class ModelConfig:
    agreement: AgreementModelConfig = field(default_factory=AgreementModelConfig)
    sst2: SST2ModelConfig = field(default_factory=SST2ModelConfig)


@dataclass
class TrainGroupConfig:
    agreement: AgreementTrainConfig = field(default_factory=AgreementTrainConfig)
    sst2: SST2TrainConfig = field(default_factory=SST2TrainConfig)


@dataclass
class StudyConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainGroupConfig = field(default_factory=TrainGroupConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    explain: ExplainConfig = field(default_factory=ExplainConfig)
    attribution: AttributionConfig = field(default_factory=AttributionConfig)
    correlate: CorrelateConfig = field(default_factory=CorrelateConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    study: str = MISSING
    seed: int = 0
    tasks: list[str] = field(default_factory=lambda: ["agreement", "sst2"])


TASKS = ("agreement", "sst2")

# Allowed values of string switches, by dotted key ("*" stands for a task name).
CHOICES: dict[str, tuple[str, ...]] = {
    "tasks": TASKS,
    "capture.agreement.split": ("train", "val", "test"),
    "capture.sst2.split": ("train", "dev", "test"),
    "capture.dtype": ("float16", "float32"),
    "explain.methods": ("raw", "rollout", "flow"),
    "explain.heads": ("mean", "sum", "max"),
    "explain.rows.*": ("cls", "max", "mean"),
    "attribution.methods": ("blank_out", "input_gradients"),
    "attribution.blank_token": ("pad", "unk", "mask"),
    "attribution.blank_target": ("predicted", "gold"),
    "attribution.blank_score": ("prob", "logit"),
    "attribution.gradient_target.*": ("p0_minus_p1", "prob", "logit"),
    "attribution.gradient_reduction": ("abs_sum", "l2", "grad_x_input"),
    "correlate.spearman": ("average", "dense_noties"),
    "correlate.undefined": ("zero", "nan"),
}
