"""Which explanation methods exist, and what each needs beside the attention probabilities: views
of the method records (:mod:`attnflow.methods`).

Kept apart from :mod:`attnflow.explain` (whose import loads the flow solver) so that validating a
config and deciding what the capture stage keeps stay light.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnflow.methods import METHODS

__all__ = ["EXPLAINER_INPUTS", "METHOD_ROWS", "MODEL_METHODS", "method_rows", "needed_inputs"]

# Views of the method records (attnflow.methods), for the code that asks one question of them.
# attention method -> the per-sample arrays it needs besides the attentions (shaped like them)
EXPLAINER_INPUTS: dict[str, tuple[str, ...]] = {r.name: r.needs for r in METHODS.values() if r.kind == "attention"}
# methods computed from the model itself (their own forward and backward pass), not from its
# attentions: the library and the CLI offer them beside EXPLAINERS (attnflow.hf.MODEL_METHODS)
MODEL_METHODS: tuple[str, ...] = tuple(r.name for r in METHODS.values() if r.kind == "model")
# attention method -> which row of its maps explains the input: "task" (task.<name>.rows, the
# study's choice for the class-agnostic maps: CLS on agreement, the authors' max on SST-2) or
# "classification" (the row of the token the classifier reads, CLS for the study's models: a
# class-specific map's other rows are dominated by each token's own identity term, and max over
# them inverts importance)
METHOD_ROWS: dict[str, str] = {r.name: r.rows for r in METHODS.values() if r.kind == "attention"}


def method_rows(method: str, task_rows: str) -> str:
    """The row choice ``method`` reads when the task's setting is ``task_rows``.

    >>> method_rows("rollout", "max"), method_rows("chefer", "max")
    ('max', 'cls')
    """
    return task_rows if METHOD_ROWS[method] == "task" else "cls"


def needed_inputs(methods: Iterable[str]) -> list[str]:
    """The extra per-sample inputs that ``methods`` need, sorted.

    >>> needed_inputs(["flow", "chefer_lrp", "chefer"])
    ['attn_grad', 'attn_relevance']
    """
    return sorted({k for m in methods for k in EXPLAINER_INPUTS[m]})
