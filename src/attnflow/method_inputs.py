"""Which explanation methods exist, and what each needs beside the attention probabilities: views
of the method records (:mod:`attnflow.methods`).

Kept apart from :mod:`attnflow.explain` (whose import loads the flow solver) so that validating a
config and deciding what the capture stage keeps stay light.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnflow.methods import METHODS

__all__ = ["EXPLAINER_INPUTS", "MODEL_METHODS", "needed_inputs"]

# Views of the method records (attnflow.methods), for the code that asks one question of them.
# attention method -> the per-sample arrays it needs besides the attentions (shaped like them)
EXPLAINER_INPUTS: dict[str, tuple[str, ...]] = {
    r.name: r.needs for r in METHODS.values() if r.kind == "attention"
}
# methods computed from the model itself (their own forward and backward pass), not from its
# attentions: the library and the CLI offer them beside EXPLAINERS (attnflow.hf.MODEL_METHODS)
MODEL_METHODS: tuple[str, ...] = tuple(r.name for r in METHODS.values() if r.kind == "model")
# Which row each method reads is its record's `rows`, decoded by attnflow.explain.apply.RowSpec alone.


def needed_inputs(methods: Iterable[str]) -> list[str]:
    """The extra per-sample inputs that ``methods`` need, sorted.

    >>> needed_inputs(["flow", "chefer_lrp", "chefer"])
    ['attn_grad', 'attn_relevance']
    """
    return sorted({k for m in methods for k in EXPLAINER_INPUTS[m]})
