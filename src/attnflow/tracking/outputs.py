"""What a stage declares in ``dvc.yaml`` (params, outs, metrics, plots), resolved for one task, and
the logging of what it produced: its small files as artifacts, every file in ``outputs.json`` (size;
tensor names and shapes for safetensors, rows and columns for parquet), its metrics files as
metrics, their headline numbers on the parent run, and an exported classifier as an MLflow model.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .runs import StageRun, flatten

__all__ = [
    "LOGGED_SUFFIXES",
    "MAX_ARTIFACT_BYTES",
    "Declared",
    "declared",
    "file_summary",
    "headline",
    "log_outputs",
]

# Files of these kinds, up to this size, are logged as artifacts; the others are only listed.
LOGGED_SUFFIXES = frozenset({".json", ".csv", ".tsv", ".parquet", ".png", ".svg", ".md", ".html", ".txt"})
MAX_ARTIFACT_BYTES = 10 * 2**20
_LISTED_KEYS = 40  # tensor names listed per safetensors file
_VAR = re.compile(r"\$\{([^}]+)\}")


@dataclass(frozen=True)
class Declared:
    """One stage's declarations in ``dvc.yaml``, ``${...}`` resolved."""

    params: dict[str, Any] = field(default_factory=dict)  # dvc.yaml params key -> its config value
    outs: list[Path] = field(default_factory=list)  # outs, metrics and plots: what the stage writes
    metrics: list[Path] = field(default_factory=list)


def _lookup(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        node = node[part]  # KeyError / TypeError: not in this config
    return node


def _resolve(text: str, config: Mapping[str, Any], item: str | None) -> str:
    """``${item}`` and ``${a.b}`` in one dvc.yaml string (KeyError when one cannot be resolved)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1) == "item":
            if item is None:
                raise KeyError("item")
            return item
        return str(_lookup(config, m.group(1)))

    return _VAR.sub(sub, text)


def _entries(section: list[Any] | None) -> list[str]:
    """Paths (or params keys) of a dvc.yaml list whose entries are strings or one-key mappings."""
    return [e if isinstance(e, str) else next(iter(e)) for e in section or [] if isinstance(e, str | dict)]


def declared(dvc_yaml: str | Path, stage: str, *, item: str | None, config: Mapping[str, Any]) -> Declared:
    """The stage's params (config values), outs and metrics, as ``dvc.yaml`` declares them for
    task ``item``; an empty :class:`Declared` when the file or the stage is absent.

    >>> import tempfile, pathlib
    >>> spec = {"stages": {"train": {"foreach": "${tasks}", "do": {
    ...     "params": ["seed", "task.${item}.model"], "outs": ["${paths.models}/${item}"],
    ...     "metrics": [{"${paths.reports}/${item}/m.json": {"cache": False}}]}}}}
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "dvc.yaml"; _ = f.write_text(yaml.safe_dump(spec))
    >>> cfg = {"seed": 0, "task": {"a": {"model": {"n": 2}}}, "paths": {"models": "m", "reports": "r"}}
    >>> d = declared(f, "train", item="a", config=cfg)
    >>> d.params, [p.as_posix() for p in d.outs], [p.as_posix() for p in d.metrics]
    ({'seed': 0, 'task.a.model': {'n': 2}}, ['m/a', 'r/a/m.json'], ['r/a/m.json'])
    """
    path = Path(dvc_yaml)
    if not path.is_file():
        return Declared()
    spec = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("stages", {}).get(stage)
    if not isinstance(spec, dict):
        return Declared()
    spec = spec.get("do", spec)
    resolved: dict[str, list[str]] = {}
    for section in ("params", "outs", "metrics", "plots"):
        resolved[section] = []
        for entry in _entries(spec.get(section)):
            try:
                resolved[section].append(_resolve(entry, config, item))
            except (KeyError, TypeError):
                continue  # names a value this config does not have
    params = {}
    for key in resolved["params"]:
        try:
            params[key] = _lookup(config, key)
        except (KeyError, TypeError):
            continue
    outs = list(dict.fromkeys(resolved["outs"] + resolved["metrics"] + resolved["plots"]))
    return Declared(
        params=params, outs=[Path(p) for p in outs], metrics=[Path(p) for p in resolved["metrics"]]
    )


def _safetensors_header(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    shown = {
        k: {"dtype": v.get("dtype"), "shape": v.get("shape")} for k, v in list(header.items())[:_LISTED_KEYS]
    }
    return {"n_tensors": len(header), "tensors": shown}


def file_summary(path: Path) -> dict[str, Any]:
    """Size, and what a reader needs to know without opening it: tensor names, dtypes and shapes
    (safetensors), rows and columns (parquet)."""
    entry: dict[str, Any] = {"bytes": path.stat().st_size}
    try:
        if path.suffix == ".safetensors":
            entry.update(_safetensors_header(path))
        elif path.suffix == ".parquet":
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(path).metadata
            entry.update(rows=meta.num_rows, columns=meta.schema.names)
    except Exception as exc:  # a summary never fails the stage
        entry["unreadable"] = f"{type(exc).__name__}: {exc}"[:200]
    return entry


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(f for f in path.rglob("*") if f.is_file() and not f.name.startswith("."))
    return [path] if path.is_file() else []


def headline(name: str, task: str | None, payload: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of one metrics file that go on the parent run, named ``<task>/...``:
    accuracies (``train_metrics.json``), the mean correlation per reference, method and layer
    (``correlations.json``: ``<task>/corr/<reference>/<method>/L<k>``, logged with step = k), the
    faithfulness table (``faithfulness.json``) and the generation summary (``summary.json``).

    >>> headline("correlations", "a", {"blank_out": {"flow": {"L1": {"mean": 0.5, "std": 0.1}}}})
    {'a/corr/blank_out/flow/L1': 0.5}
    >>> headline("train_metrics", "a", {"accuracy": 0.9, "n_eval": 10, "teacher": {"accuracy": 0.95}})
    {'a/accuracy': 0.9, 'a/teacher/accuracy': 0.95}
    """
    flat = {k.replace(".", "/"): v for k, v in flatten(payload).items()}
    flat = {k: v for k, v in flat.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    prefix = task or "generation"
    if name == "train_metrics":
        return {f"{prefix}/{k}": float(v) for k, v in flat.items() if "accuracy" in k}
    if name == "correlations":
        return {
            f"{prefix}/corr/{k[: -len('/mean')]}": float(v) for k, v in flat.items() if k.endswith("/mean")
        }
    if name == "faithfulness":
        return {f"{prefix}/faithfulness/{k}": float(v) for k, v in flat.items()}
    if name == "summary":
        return {f"{prefix}/{k}": float(v) for k, v in flat.items()}
    return {}


def log_outputs(run: StageRun, stage: Declared, *, task: str | None, model_name: str | None = None) -> None:
    """After a stage: log its declared outputs (small files as artifacts under ``outputs/``, all
    listed in ``outputs.json``), its metrics files (on its run, and their :func:`headline` on the
    parent), and every exported classifier among its outputs as an MLflow model registered as
    ``model_name``."""
    if not run.enabled:
        return
    listed: dict[str, Any] = {}
    for out in stage.outs:
        for f in _files(out):
            listed[f.as_posix()] = entry = file_summary(f)
            if f.suffix in LOGGED_SUFFIXES and entry["bytes"] <= MAX_ARTIFACT_BYTES:
                parent = f.parent.as_posix()
                run.log_artifact(f, artifact_path="outputs" if parent in ("", ".") else f"outputs/{parent}")
                entry["artifact"] = True
    if listed:
        run.log_dict({"files": listed}, "outputs.json")
    payloads: dict[str, Any] = {}
    for metrics_file in stage.metrics:
        if metrics_file.suffix == ".json" and metrics_file.is_file():
            payload = payloads[metrics_file.stem] = json.loads(metrics_file.read_text(encoding="utf-8"))
            run.log_metrics(payload, prefix=f"{metrics_file.stem}.")
            run.log_metrics(headline(metrics_file.stem, task, payload), parent=True)
    if model_name:
        from .models import log_classifier, version_tags

        for out in stage.outs:
            for manifest in _files(out):
                if manifest.name == "attnflow_model.json":
                    tags = version_tags(run, payloads.get("train_metrics"), task=task)
                    log_classifier(run, manifest.parent, registered_name=model_name, tags=tags)
