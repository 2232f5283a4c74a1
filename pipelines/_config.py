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
    """The config is invalid; the message (one line) names the file, the key and the value."""


def one_line(text: str) -> str:
    r"""`text` on one line: its lines joined by "; ", runs of spaces collapsed.

    >>> one_line("Could not override 'x'.\nTo append to your config use +x=1\n")
    "Could not override 'x'.; To append to your config use +x=1"
    """
    return "; ".join(" ".join(ln.split()) for ln in text.splitlines() if ln.strip())


def compose(
    overrides: Sequence[str] = (), *, config_dir: Path = CONF_DIR, name: str = "config"
) -> DictConfig:
    """Compose ``conf/`` with Hydra overrides, resolve it, and validate it."""
    try:
        with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base="1.3"):
            cfg = hydra_compose(config_name=name, overrides=list(overrides))
    except Exception as exc:  # hydra's override / missing-group errors
        message = one_line(str(exc)).split("; Config search path")[0]  # hydra's search path: noise here
        raise ConfigError(f"{config_dir / name}.yaml: {message}") from None
    return validate(cfg, source=str(config_dir / f"{name}.yaml"))


def _merge(schema: Any, node: Any, where: str, source: str) -> DictConfig:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
        OmegaConf.resolve(merged)
    except OmegaConfBaseException as exc:
        full = getattr(exc, "full_key", None)
        key = f"{where}.{full}" if where and full else (full or where)
        # OmegaConf appends "full_key: ..." and "object_type=..." lines: the key is named already
        message = one_line(
            "\n".join(
                ln
                for ln in str(exc).splitlines()
                if not ln.strip().startswith(("full_key:", "object_type=", "reference_type="))
            )
        )
        raise ConfigError(
            f"{source}: {key + ': ' if key else ''}{message} ({exc.__class__.__name__})".strip()
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


# The config groups whose choice names a run (MLflow tags and run names): which protocol computed
# Tables 1-2, which recipe trained the agreement model, which sensitivity switch is on.
CHOICE_GROUPS = ("protocol", "recipe", "switch")


def _option_leaves(path: Path) -> dict[str, Any]:
    """The flattened values a group option sets, at their place in the whole config (its
    ``# @package`` line: ``_global_`` or a dotted node such as ``task.agreement``)."""
    text = path.read_text(encoding="utf-8")
    package = ""
    for line in text.splitlines():
        if line.startswith("# @package"):
            package = line.split(None, 2)[2].strip()
            break
    node = OmegaConf.to_container(OmegaConf.create(text)) or {}
    prefix = "" if package in ("", "_global_") else package + "."

    def walk(tree: Any, at: str) -> dict[str, Any]:
        if isinstance(tree, dict) and tree:
            out: dict[str, Any] = {}
            for k, v in tree.items():
                out.update(walk(v, f"{at}{k}."))
            return out
        return {at[:-1]: tree}

    return walk(node, prefix)


def group_choices(config: dict[str, Any], *, config_dir: Path = CONF_DIR) -> dict[str, str]:
    """Which option of each CHOICE_GROUPS group `config` was composed with, e.g.
    ``{"protocol": "final_notebook", "recipe": "authors"}`` (``switch`` only when one is on).

    Inside a Hydra job (a sweep) Hydra's own record; otherwise (params.yaml, `dvc repro`) read
    back from the values: the option whose file's values `config` holds most (values it holds minus
    values it overrides; a key some switch also sets does not count), "custom" when none holds more
    than it overrides, so an explicit override of one of an option's keys (a smaller sample) does
    not hide the choice; a switch is on when `config` holds all of its values and at least one
    differs from what the chosen protocol and recipe give.
    """
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        chosen = HydraConfig.get().runtime.choices
        return {g: str(chosen[g]) for g in CHOICE_GROUPS if chosen.get(g) not in (None, "null")}
    flat = _flatten(config)
    switches = sorted((config_dir / "switch").glob("*.yaml")) if (config_dir / "switch").is_dir() else []
    # a switch may override a protocol's value (no_eos vs paper's <eos>): those keys do not decide
    switched = {k for path in switches for k in _option_leaves(path)}
    out: dict[str, str] = {}
    for group in ("protocol", "recipe"):
        scores = []
        for path in sorted((config_dir / group).glob("*.yaml")):
            leaves = _option_leaves(path)
            decisive = {k: v for k, v in leaves.items() if k not in switched} or leaves
            agree = sum(flat.get(k) == v for k, v in decisive.items())
            scores.append((agree - (len(decisive) - agree), agree, path.stem))
        best = max(scores, default=(0, 0, "custom"))
        out[group] = best[2] if best[0] > 0 else "custom"
    options = [(path.stem, _option_leaves(path)) for path in switches]
    held = [(name, leaves) for name, leaves in options if all(flat.get(k) == v for k, v in leaves.items())]
    if held:  # compose the chosen protocol and recipe only when a switch's values are all there
        base = _flatten(to_dict(compose([f"{g}={out[g]}" for g in ("protocol", "recipe") if out[g] != "custom"],
                                        config_dir=config_dir)))  # fmt: skip
        on = [name for name, leaves in held if any(base.get(k) != v for k, v in leaves.items())]
        if on:
            out["switch"] = ",".join(on)
    return out


def _flatten(tree: Any, at: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_flatten(v, f"{at}{k}."))
        return out
    return {at[:-1]: tree}
