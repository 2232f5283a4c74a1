"""Compose, validate, load and write the study config (params.yaml).

``conf/`` is the source of truth. ``params.yaml`` is its composition (by ``python -m
pipelines.compose`` for ``dvc repro``, or by DVC itself for ``dvc exp run -S key=value``), and every
stage reads params.yaml, never re-composes, so ``-S`` overrides reach the stage. Validation runs
before any stage touches a file: unknown keys, wrong types, unset ``???`` values, values outside
their choices and values outside their range all fail at start, naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnflow.io import write_text
from attnflow.schema import StudyConfig, problems
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
    if found := problems(container):  # choices, ranges and cross-field rules: attnflow.schema
        raise ConfigError(
            f"{source}: {found[0]}" + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
        )
    return merged


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
