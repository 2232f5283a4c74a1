"""Compose, validate, load and write the study config (params.yaml).

``conf/`` is the source of truth. ``params.yaml`` is its composition (by ``python -m
pipelines.compose`` for ``dvc repro``, or by DVC itself for ``dvc exp run -S key=value``), and every
stage reads params.yaml, never re-composes, so ``-S`` overrides reach the stage. Validation runs
before any stage touches a file: unknown keys, wrong types, unset ``???`` values, values outside
their choices and values outside their range all fail at start, naming the file and the key.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnflow.io import write_text
from attnflow.schema import CHOICES, StudyConfig
from attnflow.tasks import TASKS

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = ROOT / "conf"
PARAMS = Path("params.yaml")


def method_names(which: str) -> list[str]:
    """``${methods:study}`` / ``${methods:generation}`` in conf/: the names of the method records
    (attnflow.methods) the explain stage / the generation study run, so a new method's record
    reaches the study with no config edit."""
    from attnflow.methods import generation_methods, study_methods

    chosen = {"study": study_methods, "generation": generation_methods}
    if which not in chosen:
        raise ValueError(f"${{methods:{which}}}: choose study or generation")
    return [r.name for r in chosen[which]()]


OmegaConf.register_new_resolver("methods", method_names, replace=True)


class ConfigError(ValueError):
    """The config is invalid; the message names the file and the key."""


def compose(
    overrides: Sequence[str] = (), *, config_dir: Path = CONF_DIR, name: str = "config"
) -> DictConfig:
    """Compose ``conf/`` with Hydra overrides, resolve it, and validate it."""
    try:
        with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base="1.3"):
            cfg = hydra_compose(config_name=name, overrides=list(overrides))
    except Exception as exc:  # hydra's override / missing-group errors
        raise ConfigError(f"{config_dir / name}.yaml: {exc}") from None
    return validate(cfg, source=str(config_dir / f"{name}.yaml"))


def _merge(schema: Any, node: Any, where: str, source: str) -> DictConfig:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        OmegaConf.resolve(merged)
    except OmegaConfBaseException as exc:
        key = f"{where}.{exc.full_key}" if where and getattr(exc, "full_key", None) else where
        raise ConfigError(
            f"{source}: {key + ': ' if key else ''}{exc.__class__.__name__}: {exc}".strip()
        ) from None
    if missing := sorted(OmegaConf.missing_keys(merged)):
        raise ConfigError(
            f"{source}: mandatory value(s) not set: {', '.join(f'{where}.{k}' if where else k for k in missing)}"
        )
    return merged


def validate(cfg: DictConfig | dict, *, source: str = "config") -> DictConfig:
    """Merge into the schema and check every task block, choice and range; return the merged config."""
    merged = _merge(StudyConfig, cfg, "", source)
    for name in merged.task:
        if name not in TASKS:
            raise ConfigError(f"{source}: task.{name}: unknown task; known: {', '.join(TASKS)}")
        spec = TASKS[name]
        for block, schema in (("data", spec.data_config), ("model", spec.model_config)):
            merged.task[name][block] = _merge(
                schema, merged.task[name][block], f"task.{name}.{block}", source
            )
    container = OmegaConf.to_container(merged)
    if not container["tasks"]:
        raise ConfigError(f"{source}: tasks is empty; name at least one of {', '.join(container['task'])}")
    for task in container["tasks"]:
        if task not in container["task"]:
            raise ConfigError(
                f"{source}: tasks: {task!r} has no config node task.{task}; known: {', '.join(container['task'])}"
            )
    for key, value, allowed in _choice_checks(container):
        for v in value if isinstance(value, list) else [value]:
            if v not in allowed:
                raise ConfigError(f"{source}: {key}={v!r} is not one of {', '.join(map(str, allowed))}")
    for pattern, ok, rule in RANGES:
        for key, value in _lookup(container, pattern.split(".")):
            if value is not None and not ok(value):
                raise ConfigError(f"{source}: {key}={value!r}: {rule}")
    for check in STUDY_CHECKS:
        if problem := check(container):
            raise ConfigError(f"{source}: {problem}")
    for check in TASK_CHECKS:
        for name, task in container["task"].items():
            if problem := check(task):
                raise ConfigError(f"{source}: task.{name}.{problem}")
    return merged


def _choice_checks(container: dict) -> list[tuple[str, Any, Sequence[Any]]]:
    checks = [
        (k, v, allowed)
        for pattern, allowed in CHOICES.items()
        for k, v in _lookup(container, pattern.split("."))
    ]
    classes = [(f"task.{n}.gradient_class", t["gradient_class"]) for n, t in container["task"].items()]
    for key, cls in [*classes, ("capture.target", container["capture"]["target"])]:
        if cls not in ("predicted", "gold") and not str(cls).isdigit():
            checks.append((key, cls, ("predicted", "gold", "a class index")))
    for name, task in container["task"].items():
        checks.append((f"task.{name}.capture.split", task["capture"]["split"], TASKS[name].splits))
    return checks


def _positive(x: Any) -> bool:
    return x > 0


def _at_least(n: int) -> Callable[[Any], bool]:
    return lambda x: x >= n


def _nonempty(x: Any) -> bool:
    return len(x) > 0


# (dotted pattern, check, the rule in words); each part is a glob over the keys at that level
# ("*" any key, "*_pdrop" every dropout); a None value passes.
RANGES: list[tuple[str, Callable[[Any], bool], str]] = [
    ("seed", _at_least(0), "must be >= 0"),
    ("data.timeout_s", _positive, "must be > 0"),
    ("task.*.train.max_epochs", _at_least(1), "must be >= 1"),
    ("task.*.train.batch_size", _at_least(1), "must be >= 1"),
    ("task.*.train.eval_batch_size", _at_least(1), "must be >= 1"),
    ("task.*.train.lr", _positive, "the learning rate must be > 0"),
    ("task.*.train.weight_decay", _at_least(0), "must be >= 0"),
    ("task.*.train.warmup_ratio", lambda x: 0 <= x <= 1, "must lie in [0, 1]"),
    ("task.*.train.gradient_clip_val", _at_least(0), "must be >= 0 (0 = no clipping)"),
    ("task.*.train.patience", _at_least(1), "must be >= 1"),
    ("task.*.train.max_time_minutes", _positive, "must be > 0 or null"),
    ("task.*.train.train_subset", _at_least(1), "must be >= 1 or null"),
    ("task.*.train.val_size", _at_least(1), "must be >= 1 or null"),
    ("task.*.train.max_length", _at_least(2), "must be >= 2 (CLS and a token) or null"),
    ("task.*.capture.n_samples", _at_least(1), "must be >= 1"),
    ("task.*.model.*_pdrop", lambda x: 0 <= x < 1, "must lie in [0, 1)"),
    ("task.*.model.teacher.*_dropout", lambda x: 0 <= x < 1, "must lie in [0, 1)"),
    ("task.*.model.initializer_range", _positive, "must be > 0"),
    ("task.*.train.distill_rate", lambda x: 0 <= x <= 1, "must lie in [0, 1]"),
    ("task.*.train.distill_temperature", _positive, "must be > 0"),
    ("task.*.model.n_layer", _at_least(1), "must be >= 1"),
    ("task.*.model.n_head", _at_least(1), "must be >= 1"),
    ("task.*.model.block_size", _at_least(2), "must be >= 2"),
    ("task.*.data.min_count", _at_least(1), "must be >= 1"),
    ("trainer.num_workers", _at_least(0), "must be >= 0"),
    ("trainer.log_every_n_steps", _at_least(1), "must be >= 1"),
    ("capture.batch_size", _at_least(1), "must be >= 1"),
    ("capture.max_length", _at_least(2), "must be >= 2 (CLS and a token)"),
    ("explain.methods", _nonempty, "name at least one method"),
    ("explain.residual", lambda x: 0 <= x <= 1, "must lie in [0, 1]"),
    ("attribution.methods", _nonempty, "name at least one importance score"),
    ("attribution.batch_size", _at_least(1), "must be >= 1"),
    ("correlate.n_boot", _at_least(0), "must be >= 0"),
    ("correlate.ci", lambda x: 0 < x < 1, "must lie in (0, 1)"),
    ("report.n_examples", _at_least(0), "must be >= 0"),
    ("task.*.faithfulness.n_samples", _at_least(1), "must be >= 1"),
    ("faithfulness.layers.*", _at_least(1), "layers are 1-based"),
    ("faithfulness.top_k", _at_least(1), "must be >= 1"),
    ("faithfulness.batch_size", _at_least(1), "must be >= 1"),
    ("faithfulness.n_boot", _at_least(0), "must be >= 0"),
    ("generate.max_new_tokens", _at_least(1), "must be >= 1"),
    ("generate.ks.*", _at_least(1), "must be >= 1"),
    ("generate.n_random", _at_least(1), "must be >= 1"),
    ("generate.methods", _nonempty, "name at least one method"),
    ("generate.prompts", _nonempty, "give at least one prompt"),
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


TASK_CHECKS: list[Callable[[dict], str | None]] = [_split_sums_to_one, _heads_divide_width, _teacher_exists]


def _cls_ranked_only_if_blanked(study: dict) -> str | None:
    if study["correlate"]["include_cls"]["blank_out"] and study["attribution"]["blank_positions"] != "all":
        return (
            "correlate.include_cls.blank_out=true needs attribution.blank_positions=all: with "
            f"{study['attribution']['blank_positions']!r} CLS is never blanked and would be ranked with a score of 0"
        )
    return None


STUDY_CHECKS: list[Callable[[dict], str | None]] = [_cls_ranked_only_if_blanked]


def _lookup(tree: Any, parts: list[str], prefix: str = ""):
    if not parts:
        yield prefix.rstrip("."), tree
        return
    head, rest = parts[0], parts[1:]
    if isinstance(tree, list) and head == "*":  # every element of a list
        tree = {str(i): v for i, v in enumerate(tree)}
    if not isinstance(tree, dict):
        return
    keys = [k for k in tree if fnmatchcase(str(k), head)]  # "*" and patterns like "*_pdrop"
    for key in keys:
        yield from _lookup(tree[key], rest, f"{prefix}{key}.")


def to_dict(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def load(path: str | Path = PARAMS) -> DictConfig:
    """Load and validate the composed config that DVC hands the stages."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: not found; run `python -m pipelines.compose` to generate it from conf/")
    try:
        raw = OmegaConf.load(path)
    except Exception as exc:  # yaml errors carry line numbers
        raise ConfigError(f"{path}: cannot parse: {exc}") from None
    return validate(raw, source=str(path))


def dump(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)


def write(cfg: DictConfig, path: str | Path = PARAMS) -> None:
    """Write params.yaml atomically, with a header saying where it comes from."""
    write_text(
        path, "# Generated from conf/ by `python -m pipelines.compose`; do not edit by hand.\n" + dump(cfg)
    )
