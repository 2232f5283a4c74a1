"""The study's config schema, the one source of its rules: types, choices, ranges, cross-field rules.

The values live in ``conf/`` (one fact in one place): every field here is ``???`` (mandatory) or
a container, so a key missing from the YAML fails at start instead of taking a silent default.
Plain dataclasses, so the library depends on neither Hydra nor Lightning. A field's allowed range
sits on the field (``ranged(AT_LEAST_1)``: dataclass metadata), its allowed strings in ``CHOICES``,
rules across fields in ``STUDY_RULES`` / ``TASK_RULES``; :func:`problems` checks a config tree
against all of them. ``pipelines/_config.py`` merges the composed config into the dataclasses with
OmegaConf (an unknown key or a wrongly typed value fails at start with the key's name), merges each
task's ``data`` / ``model`` block into the dataclasses of its :class:`attnflow.tasks.TaskSpec`, then
calls :func:`problems`; the CLI checks its options with :func:`value_problem`. No rule is written
twice.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from attnflow.methods import generation_methods, study_methods

MISSING: Any = "???"

__all__ = [
    "CHOICES",
    "MISSING",
    "STUDY_RULES",
    "TASK_RULES",
    "CaptureTaskConfig",
    "Range",
    "StudyConfig",
    "TaskConfig",
    "TrainConfig",
    "TrainerConfig",
    "problems",
    "ranged",
    "value_problem",
]


@dataclass(frozen=True)
class Range:
    """The allowed values of one config field: ``check(value)`` holds for them, ``rule`` says it in words."""

    check: Callable[[Any], bool]
    rule: str


def at_least(n: int, why: str = "") -> Range:
    return Range(lambda x: x >= n, f"must be >= {n}{why}")


AT_LEAST_0 = at_least(0)
AT_LEAST_1 = at_least(1)
POSITIVE = Range(lambda x: x > 0, "must be > 0")
UNIT = Range(lambda x: 0 <= x <= 1, "must lie in [0, 1]")
DROPOUT = Range(lambda x: 0 <= x < 1, "must lie in [0, 1)")


def nonempty(rule: str) -> Range:
    return Range(lambda x: len(x) > 0, rule)


def ranged(
    allowed: Range, default: Any = MISSING, *, factory: Callable[[], Any] | None = None, each: bool = False
) -> Any:
    """A dataclass field whose value (each element with `each`) must satisfy `allowed`; None passes
    (an optional field left unset)."""
    metadata = {"range": allowed, "each": each}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


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
class ReportConfig:
    n_examples: int = ranged(AT_LEAST_0)
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
    seed: int = ranged(AT_LEAST_0)
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


def _split_sums_to_one(task: dict) -> str | None:
    split = task["data"].get("split")
    if isinstance(split, dict):
        parts = list(split.values())
        if min(parts) < 0 or not math.isclose(sum(parts), 1.0, abs_tol=1e-9):
            return f"data.split={split}: fractions must be >= 0 and sum to 1"
    return None


def _heads_divide_width(task: dict) -> str | None:
    model = task["model"]
    if "n_head" in model and "n_embd" in model and model["n_embd"] % model["n_head"]:
        return f"model.n_head={model['n_head']}: must divide model.n_embd={model['n_embd']}"
    return None


def _teacher_exists(task: dict) -> str | None:
    if task["train"]["teacher"] != "none" and "teacher" not in task["model"]:
        return f"train.teacher={task['train']['teacher']!r}: this task has no teacher model (use none)"
    return None


# Rules across the fields of one task block (task.<name>): problem (relative key first) or None.
TASK_RULES: tuple[Callable[[dict], str | None], ...] = (
    _split_sums_to_one,
    _heads_divide_width,
    _teacher_exists,
)


def _cls_ranked_only_if_blanked(study: dict) -> str | None:
    if study["correlate"]["include_cls"]["blank_out"] and study["attribution"]["blank_positions"] != "all":
        return (
            "correlate.include_cls.blank_out=true needs attribution.blank_positions=all: with "
            f"{study['attribution']['blank_positions']!r} CLS is never blanked and would be ranked with a score of 0"
        )
    return None


# Rules across the study's groups: problem or None.
STUDY_RULES: tuple[Callable[[dict], str | None], ...] = (_cls_ranked_only_if_blanked,)


def _lookup(tree: Any, parts: list[str], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every node matching `parts` (globs per level; "*" also every list element)."""
    if not parts:
        yield prefix.rstrip("."), tree
        return
    head, rest = parts[0], parts[1:]
    if isinstance(tree, list) and head == "*":
        tree = {str(i): v for i, v in enumerate(tree)}
    if not isinstance(tree, dict):
        return
    for key in [k for k in tree if fnmatchcase(str(k), head)]:
        yield from _lookup(tree[key], rest, f"{prefix}{key}.")


def _choice_problems(study: dict) -> Iterator[str]:
    from attnflow.tasks import TASKS

    checks = [
        (k, v, allowed) for pattern, allowed in CHOICES.items() for k, v in _lookup(study, pattern.split("."))
    ]
    classes = [(f"task.{n}.gradient_class", t["gradient_class"]) for n, t in study["task"].items()]
    for key, cls in [*classes, ("capture.target", study["capture"]["target"])]:
        if cls not in ("predicted", "gold") and not str(cls).isdigit():
            checks.append((key, cls, ("predicted", "gold", "a class index")))
    for name, task in study["task"].items():
        if name in TASKS:
            checks.append((f"task.{name}.capture.split", task["capture"]["split"], TASKS[name].splits))
    for key, value, allowed in checks:
        for v in value if isinstance(value, list) else [value]:
            if v not in allowed:
                yield f"{key}={v!r} is not one of {', '.join(map(str, allowed))}"


def _range_problems(schema: type, tree: Any, prefix: str = "") -> Iterator[str]:
    """Every field of `tree` outside the Range on its dataclass field, recursively."""
    if not isinstance(tree, dict):
        return
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.name not in tree:
            continue
        key, value = f"{prefix}{f.name}", tree[f.name]
        allowed = f.metadata.get("range")
        if allowed is not None and value is not None:
            items = [(f"{key}.{i}", v) for i, v in enumerate(value)] if f.metadata["each"] else [(key, value)]
            yield from (f"{k}={v!r}: {allowed.rule}" for k, v in items if not allowed.check(v))
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _range_problems(kind, value, f"{key}.")
        elif typing.get_origin(kind) is dict and dataclasses.is_dataclass(typing.get_args(kind)[-1]):
            for name, node in (value or {}).items():
                yield from _range_problems(typing.get_args(kind)[-1], node, f"{key}.{name}.")


def problems(study: dict) -> list[str]:
    """Every rule of the schema that the study config tree `study` (merged, as plain containers)
    breaks: choices, ranges (also of each task's data / model block, typed by its TaskSpec) and
    the cross-field rules, each as "key=value: rule"; [] when it is valid."""
    from attnflow.tasks import TASKS

    found = list(_choice_problems(study))
    found += _range_problems(StudyConfig, study)
    for name, task in study["task"].items():
        if name in TASKS:
            for block, schema in (("data", TASKS[name].data_config), ("model", TASKS[name].model_config)):
                found += _range_problems(schema, task[block], f"task.{name}.{block}.")
    found += [p for rule in STUDY_RULES if (p := rule(study))]
    found += [
        f"task.{name}.{p}" for name, task in study["task"].items() for rule in TASK_RULES if (p := rule(task))
    ]
    return found


def value_problem(key: str, value: Any) -> str | None:
    """The rule that `value` breaks as the study's `key` (a dotted path of StudyConfig, e.g.
    "explain.residual"), or None: how the CLI checks its options against the same rules."""
    schema: Any = StudyConfig
    *parents, name = key.split(".")
    for part in parents:
        schema = typing.get_type_hints(schema)[part]
    f = {f.name: f for f in dataclasses.fields(schema)}[name]
    allowed = f.metadata.get("range")
    if allowed is not None and not allowed.check(value):
        return allowed.rule
    if key in CHOICES and value not in CHOICES[key]:
        return f"is not one of {', '.join(CHOICES[key])}"
    return None
