"""A trained classifier as an MLflow model: PyTorch flavour, with a signature and an input example,
registered under a stable name per task, so that

    mlflow.pyfunc.load_model("models:/attnflow-agreement/latest").predict(ids)

returns the logits for a ``(batch, tokens)`` int64 array of token ids (padded with the model's pad
id; ``input_example.json`` in the model's artifacts shows one). The exported folder that DVC tracks
stays the source of truth: this is a copy for MLflow's registry and serving. The PyTorch flavour
pickles the module, so loading it needs ``attnflow`` importable (``pip install -e .``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .runs import StageRun

__all__ = ["EXAMPLE_TEXTS", "TokenIdsClassifier", "log_classifier", "registered_name"]

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


def log_classifier(run: StageRun, model_dir: str | Path, *, registered_name: str) -> Any:
    """Log the classifier exported in ``model_dir`` (:func:`attnflow.models.io.save_classifier`) as
    the MLflow model ``model`` of ``run``, registered as ``registered_name``; returns the model info."""
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
    return mlflow.pytorch.log_model(
        wrapped,
        name="model",
        signature=signature,
        input_example=example,
        registered_model_name=registered_name,
        pip_requirements=_requirements(model),
        run_id=run.run_id,
    )
