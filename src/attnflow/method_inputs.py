"""Which explanation methods exist, and what each needs beside the attention probabilities.

Kept apart from :mod:`attnflow.explain` (whose import loads the flow solver) so that validating a
config and deciding what the capture stage keeps stay light. ``attnflow.explain.EXPLAINERS`` has
exactly these names (a test checks it).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["EXPLAINER_INPUTS", "needed_inputs"]

# method -> the per-sample arrays it needs besides the attentions (shaped like them)
EXPLAINER_INPUTS: dict[str, tuple[str, ...]] = {
    "raw": (),
    "rollout": (),
    "flow": (),
    "chefer": ("attn_grad",),  # d logit[target] / d attention
    "chefer_lrp": ("attn_grad", "attn_relevance"),  # and LRP's relevance of each attention map
}


def needed_inputs(methods: Iterable[str]) -> list[str]:
    """The extra per-sample inputs that ``methods`` need, sorted.

    >>> needed_inputs(["flow", "chefer_lrp", "chefer"])
    ['attn_grad', 'attn_relevance']
    """
    return sorted({k for m in methods for k in EXPLAINER_INPUTS[m]})
