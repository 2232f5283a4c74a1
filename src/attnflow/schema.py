"""The study's config schema, the one source of its rules: types, choices, ranges, cross-field rules.

The values live in ``conf/`` (one fact in one place): every field here is ``???`` (mandatory) or
a container, so a key missing from the YAML fails at start instead of taking a silent default.
Plain dataclasses, so the library depends on neither Hydra nor Lightning. A field's allowed range
sits on the field (``ranged(AT_LEAST_1)``: dataclass metadata), its allowed strings in ``CHOICES``
(the library's own tuples, from :mod:`attnflow.options`: ranges and choices are never restated here),
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
class ReportConfig:
    n_examples: int = ranged(AT_LEAST_0)
    examples: list[str] = field(default_factory=list)
    allow_mixed_code: bool = MISSING  # pool sweep seeds run by other code than this run (named in the report)


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
    pronouns: PronounsConfig = field(default_factory=PronounsConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    study: str = MISSING
    seed: int = ranged(AT_LEAST_0)
    tasks: list[str] = field(default_factory=list)


# Allowed values of string switches, by dotted key ("*" stands for any key at that level).
# Task names and capture splits come from attnflow.tasks.TASKS.
CHOICES: dict[str, tuple[str, ...]] = {
    "explain.methods": tuple(r.name for r in study_methods()),
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
    "generate.methods": tuple(r.name for r in generation_methods()),
    "generate.sinks": options.SINK_CHOICES,
    "generate.receptive_fields": options.RECEPTIVE_FIELDS,
    "pronouns.methods": options.PRONOUN_METHODS,
    "pronouns.reduce": options.ANTECEDENT_REDUCTIONS,
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


def _holds_dataclasses(kind: Any) -> bool:
    """`kind` is dict[str, <a dataclass>] (e.g. ``task``: checked field by field instead)."""
    return typing.get_origin(kind) is dict and dataclasses.is_dataclass(typing.get_args(kind)[-1])


def _present_fields(schema: type, tree: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any, Any]]:
    """(key, value, dataclass field, its type) of every field of `schema` present in `tree`, each
    before the fields under it: nested dataclasses and dicts of dataclasses, depth first."""
    if not isinstance(tree, dict):
        return
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.name not in tree:
            continue
        key, value, kind = f"{prefix}{f.name}", tree[f.name], hints[f.name]
        yield key, value, f, kind
        if dataclasses.is_dataclass(kind):
            yield from _present_fields(kind, value, f"{key}.")
        elif _holds_dataclasses(kind):
            for name, node in (value or {}).items():
                yield from _present_fields(typing.get_args(kind)[-1], node, f"{key}.{name}.")


def _range_problems(schema: type, tree: Any, prefix: str = "") -> Iterator[str]:
    """Every field of `tree` outside the Range on its dataclass field, recursively."""
    for key, value, f, _ in _present_fields(schema, tree, prefix):
        allowed = f.metadata.get("range")
        if allowed is not None and value is not None:
            items = [(f"{key}.{i}", v) for i, v in enumerate(value)] if f.metadata["each"] else [(key, value)]
            yield from (f"{k}={v!r}: {allowed.rule}" for k, v in items if not allowed.check(v))


FINITE_RULE = "must be a finite number (not inf or nan)"


def _meaning_problems(schema: type, tree: Any, prefix: str = "") -> Iterator[str]:
    """Values that pass their type and range but mean nothing, recursively: a float that is not
    finite (``inf`` is no timeout, ``nan`` no rate), a list that names one thing twice (a method run
    twice, a task trained twice), a text in a list or mapping that is empty (a prompt with nothing
    to complete)."""
    for key, value, _, kind in _present_fields(schema, tree, prefix):
        if isinstance(value, float) and not math.isfinite(value):
            yield f"{key}={value!r}: {FINITE_RULE}"
        elif isinstance(value, list):
            scalars = [v for v in value if isinstance(v, (str, int, float))]
            if any(isinstance(v, float) and not math.isfinite(v) for v in scalars):
                yield f"{key}={value!r}: each {FINITE_RULE}"
            if any(isinstance(v, str) and not v.strip() for v in scalars):
                yield f"{key}={value!r}: holds an empty text"
            if twice := [v for i, v in enumerate(scalars) if v in scalars[:i]]:
                yield f"{key}={value!r}: names {twice[0]!r} twice; each may appear once"
        elif isinstance(value, dict) and not _holds_dataclasses(kind):
            for name, v in value.items():
                if isinstance(v, str) and not v.strip():
                    yield f"{key}.{name}={v!r}: empty (only whitespace); give it text"


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
    found += _meaning_problems(StudyConfig, study)  # duplicates, non-finite floats, empty texts
    for name, task in study["task"].items():
        if name in TASKS:
            for block, schema in (("data", TASKS[name].data_config), ("model", TASKS[name].model_config)):
                found += _meaning_problems(schema, task[block], f"task.{name}.{block}.")
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
    if isinstance(value, float) and not math.isfinite(value):
        return FINITE_RULE
    allowed = f.metadata.get("range")
    if allowed is not None and not allowed.check(value):
        return allowed.rule
    if key in CHOICES and value not in CHOICES[key]:
        return f"is not one of {', '.join(CHOICES[key])}"
    return None
