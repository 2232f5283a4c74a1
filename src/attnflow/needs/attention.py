"""The attention-shaped needs the bridge makes (`attnflow.bridge.forward`): ∇A and R(A)."""

from __future__ import annotations

import numpy as np

from . import ATTENTION_AXES, NeedRecord

__all__ = ["RECORDS"]


def _gradient(rng: np.random.Generator, attn: np.ndarray) -> np.ndarray:
    """∂ logit / ∂ A: any real value, either sign."""
    return rng.standard_normal(np.shape(attn))


def _relevance(rng: np.random.Generator, attn: np.ndarray) -> np.ndarray:
    """R(A) = A ⊙ (random of either sign): the form LRP-0 through A·V gives (zero wherever A is)."""
    return np.asarray(attn) * rng.standard_normal(np.shape(attn))


_BY_GRAD = "the same forward, autograd through the eager attention probabilities (attnflow.bridge.hf)"
_BY_LRP = "attnflow.lrp.lrp_relevance (LRP rules of the architecture)"
RECORDS = (
    NeedRecord("attn_grad", "∂ z_c / ∂ A, the target logit's gradient at each attention probability",
               ATTENTION_AXES, {"encoder": _BY_GRAD, "gpt2": _BY_GRAD, "llama": _BY_GRAD}, _gradient),
    NeedRecord("attn_relevance", "R(A), the LRP relevance of every attention map (Chefer et al. 2021)",
               ATTENTION_AXES, {"encoder": _BY_LRP, "gpt2": _BY_LRP, "llama": _BY_LRP}, _relevance),
)  # fmt: skip
