"""A trained classifier as an MLflow model: PyTorch flavour, with a signature and an input example,
registered under a stable name per task, so that

    mlflow.pyfunc.load_model("models:/attnflow-agreement/latest").predict(ids)

returns the logits for a ``(batch, tokens)`` int64 array of token ids (padded with the model's pad
id; ``input_example.json`` in the model's artifacts shows one). The exported folder that DVC tracks
stays the source of truth: this is a copy for MLflow's registry and serving. The PyTorch flavour
pickles the module, so loading it needs ``attnflow`` importable (``pip install -e .``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .runs import StageRun

__all__ = [
    "EXAMPLE_TEXTS",
    "TokenIdsClassifier",
    "log_classifier",
    "registered_name",
    "version_description",
    "version_tags",
]

# What the input example encodes (unknown words become <unk>: it shows the format, not the task).
EXAMPLE_TEXTS = ("the keys to the cabinet", "a gripping , funny film")


def registered_name(task: str) -> str:
    """The registry name of a task's classifier: ``attnflow-<task>``."""
    return f"attnflow-{task}"


class TokenIdsClassifier(nn.Module):
    """One tensor in, one tensor out, as MLflow's PyTorch flavour needs: token ids ``(B, T)``
    (any numeric dtype; positions holding ``pad_id`` are padding) to logits ``(B, C)``."""

    def __init__(self, model: nn.Module, pad_id: int) -> None:
        super().__init__()
        self.model = model
        self.pad_id = int(pad_id)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        ids = input_ids.long()
        return self.model(input_ids=ids, attention_mask=(ids != self.pad_id).long()).logits


def _requirements(model: nn.Module) -> list[str]:
    import mlflow

    reqs = [f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}", "safetensors"]
    if type(model).__name__ == "HFClassifier":
        import transformers

        reqs.append(f"transformers=={transformers.__version__}")
    return reqs


def version_tags(
    run: StageRun, train_metrics: Mapping[str, Any] | None, *, task: str | None
) -> dict[str, str]:
    """The tags of a registered model version: the run's seed, config hash, the config-group
    choices (protocol, recipe, switch), the task and the held-out accuracy of ``train_metrics``
    (as ``<eval_split>_accuracy``, e.g. ``test_accuracy``)."""
    run_tags = run.client.get_run(run.run_id).data.tags
    keys = ("seed", "config_hash", "protocol", "recipe", "switch", "git_commit")
    tags = {k: run_tags[k] for k in keys if k in run_tags}
    if task:
        tags["task"] = task
    if train_metrics and isinstance(train_metrics.get("accuracy"), int | float):
        tags[f"{train_metrics.get('eval_split', 'test')}_accuracy"] = (
            f"{float(train_metrics['accuracy']):.4f}"
        )
    return tags


def version_description(tags: Mapping[str, str]) -> str:
    """One line a reader of the model registry can tell versions apart by.

    >>> version_description({"task": "agreement", "seed": "1", "protocol": "paper",
    ...     "recipe": "authors", "config_hash": "0123456789abcdef", "test_accuracy": "0.9812"})
    'agreement classifier, seed 1, protocol paper, recipe authors, config 0123456; test_accuracy 0.9812'
    """
    parts = [f"{tags.get('task', 'attnflow')} classifier"]
    parts += [f"{k} {tags[k]}" for k in ("seed", "protocol", "recipe", "switch") if k in tags]
    if "config_hash" in tags:
        parts.append(f"config {tags['config_hash'][:7]}")
    accuracy = [f"{k} {v}" for k, v in tags.items() if k.endswith("_accuracy")]
    return ", ".join(parts) + ("; " + ", ".join(accuracy) if accuracy else "")


def log_classifier(
    run: StageRun, model_dir: str | Path, *, registered_name: str, tags: Mapping[str, str] | None = None
) -> Any:
    """Log the classifier exported in ``model_dir`` (:func:`attnflow.models.io.save_classifier`) as
    the MLflow model ``model`` of ``run``, registered as ``registered_name``, the new version
    tagged with ``tags`` and described by :func:`version_description`; returns the model info."""
    import mlflow.pytorch
    from mlflow.models import ModelSignature
    from mlflow.types import Schema, TensorSpec

    from attnflow.models.io import load_classifier

    model, encoder = load_classifier(model_dir)
    wrapped = TokenIdsClassifier(model, encoder.pad_id).eval()
    example = encoder.encode(list(EXAMPLE_TEXTS))["input_ids"]
    example = np.asarray(example.numpy() if isinstance(example, torch.Tensor) else example, dtype=np.int64)
    with torch.no_grad():
        n_classes = wrapped(torch.from_numpy(example)).shape[-1]
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.int64), (-1, -1))]),
        outputs=Schema([TensorSpec(np.dtype(np.float32), (-1, n_classes))]),
    )
    info = mlflow.pytorch.log_model(
        wrapped,
        name="model",
        signature=signature,
        input_example=example,
        registered_model_name=registered_name,
        pip_requirements=_requirements(model),
        run_id=run.run_id,
    )
    version = getattr(info, "registered_model_version", None)
    if version is not None and tags:
        for key, value in tags.items():
            run.client.set_model_version_tag(registered_name, str(version), key, str(value))
        run.client.update_model_version(registered_name, str(version), description=version_description(tags))
    return info
