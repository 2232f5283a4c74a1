"""The model side of a guided deletion: the answer's log-probability as prompt tokens are deleted.

    s_i = Σ_{t=s..e} log p(a_t | prompt with positions o_0..o_{i-1} replaced by the pad token, a_<t)

for i = 0..P, o = `attnflow.answer.metrics.deletion_order(w)`, (s, e) the explained answer tokens
(``span``, inclusive; default all, as `attnflow.answer.span`): P + 1 teacher-forced forwards,
batched. ``steps`` (None: every i, as FlashTrace) scores the curve at ``steps + 1`` evenly spaced
deletion counts and fills the rest by linear interpolation: an approximation for long prompts,
named as such wherever it is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnflow.generate.faithfulness import continuation_logprobs

from .metrics import deletion_areas, deletion_order
from .span import explained_span

__all__ = ["deletion_scores", "guided_deletion"]


def deletion_scores(
    model: Any,
    prompt_ids: Sequence[int],
    answer_ids: Sequence[int],
    weights: np.ndarray,
    *,
    pad_id: int,
    protect: Sequence[int] = (),
    steps: int | None = None,
    batch_size: int = 8,
    span: tuple[int, int] | None = None,
) -> np.ndarray:
    """(F + 1,) s_i (module docstring) over the F deletable positions. ``protect``: prompt positions
    never deleted (a chat template's own tokens: FlashTrace deletes only the user's text); the order
    runs over the others. steps: see the module docstring."""
    prompt, answer = [int(i) for i in prompt_ids], [int(i) for i in answer_ids]
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(prompt),):
        raise ValueError(f"weights must hold one value per prompt token ({len(prompt)}), got {w.shape}")
    keep = set(int(p) for p in protect)
    order = [int(j) for j in deletion_order(w) if int(j) not in keep]
    counts = list(range(len(order) + 1))
    if steps is not None:
        if steps < 1:
            raise ValueError(f"steps must be at least 1, got {steps}")
        counts = sorted(
            set(np.linspace(0, len(order), min(steps, len(order)) + 1).round().astype(int).tolist())
        )
    prompts = []
    for c in counts:
        ids = prompt.copy()
        for j in order[:c]:
            ids[j] = pad_id
        prompts.append(ids)
    first, last = explained_span(len(answer), span)
    measured = continuation_logprobs(model, prompts, answer, batch_size)[:, first : last + 1].sum(axis=1)
    return np.interp(np.arange(len(order) + 1), counts, measured)


def guided_deletion(
    model: Any,
    prompt_ids: Sequence[int],
    answer_ids: Sequence[int],
    weights: np.ndarray,
    *,
    pad_id: int,
    protect: Sequence[int] = (),
    steps: int | None = None,
    batch_size: int = 8,
    span: tuple[int, int] | None = None,
) -> dict[str, float]:
    """RISE, MAS and RISE+AP of one attribution (`attnflow.answer.metrics.deletion_areas`) over the
    deletable prompt tokens."""
    w = np.asarray(weights, dtype=np.float64)
    scores = deletion_scores(model, prompt_ids, answer_ids, w, pad_id=pad_id, protect=protect, steps=steps,
                             batch_size=batch_size, span=span)  # fmt: skip
    free = np.delete(w, sorted({int(p) for p in protect}))  # the deletable positions, in prompt order
    rise, mas, rise_ap = deletion_areas(scores, free)
    return {"rise": rise, "mas": mas, "rise_ap": rise_ap}
