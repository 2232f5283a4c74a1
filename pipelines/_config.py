"""Compose, validate, load and write the study config (params.yaml).

``conf/`` is the source of truth. ``params.yaml`` is its composition (by ``python -m
pipelines.compose`` for ``dvc repro``, or by DVC itself for ``dvc exp run -S key=value``), and every
stage reads params.yaml, never re-composes, so ``-S`` overrides reach the stage.
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
from attnflow.schema import CHOICES, StudyConfig

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = ROOT / "conf"
PARAMS = Path("params.yaml")


class ConfigError(ValueError):
    """The config is invalid; the message names the file and the key."""


def compose(
    overrides: Sequence[str] = (), *, config_dir: Path = CONF_DIR, name: str = "config"
) -> DictConfig:
    """Compose ``conf/`` with Hydra overrides, resolve it, and validate it."""
    with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base="1.3"):
        cfg = hydra_compose(config_name=name, overrides=list(overrides))
    return validate(cfg, source=str(config_dir / f"{name}.yaml"))


def validate(cfg: DictConfig | dict, *, source: str = "config") -> DictConfig:
    """Merge into the schema: unknown keys, wrong types, ``???`` values and bad choices fail here."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(StudyConfig), cfg)
        OmegaConf.resolve(merged)
        missing = sorted(OmegaConf.missing_keys(merged))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{source}: {exc.__class__.__name__}: {exc}".strip()) from None
    if missing:
        raise ConfigError(f"{source}: mandatory value(s) not set: {', '.join(missing)}")
    container = OmegaConf.to_container(merged)
    for pattern, allowed in CHOICES.items():
        for key, value in _lookup(container, pattern.split(".")):
            for v in value if isinstance(value, list) else [value]:
                if v not in allowed:
                    raise ConfigError(f"{source}: {key}={v!r} is not one of {', '.join(allowed)}")
    for task in container["tasks"]:
        cls = container["attribution"]["gradient_class"][task]
        if cls not in ("predicted", "gold") and not str(cls).isdigit():
            raise ConfigError(
                f"{source}: attribution.gradient_class.{task}={cls!r} is not predicted, gold or a class index"
            )
    return merged


def _lookup(tree: Any, parts: list[str], prefix: str = ""):
    if not parts:
        yield prefix.rstrip("."), tree
        return
    head, rest = parts[0], parts[1:]
    if not isinstance(tree, dict):
        return
    keys = list(tree) if head == "*" else [head] if head in tree else []
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
