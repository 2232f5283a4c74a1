"""Deletion curve (Samek et al. 2017, "Evaluating the visualization of what a DNN has learned").

The model output as the k highest-scored tokens are blanked out, k = 0, 1, 2, ...: the input for
the faithfulness score AOPC (``attnflow.metrics.aopc``). Not in Abnar & Zuidema 2020.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from ._model import _check_batch, _eval_mode, _logits, _target_classes
from .blank_out import PAD_ID

__all__ = ["deletion_curve"]


def deletion_curve(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    scores: Tensor,
    *,
    blank_id: int = PAD_ID,
    mask_blank: bool | None = None,
    pad_id: int = PAD_ID,
    target: Literal["predicted", "gold"] = "predicted",
    labels: Tensor | None = None,
    score: Literal["prob", "logit"] = "prob",
    most_important_first: bool = True,
    max_steps: int | None = None,
    skip_positions: Sequence[int] = (0,),
    batch_size: int = 256,
) -> Tensor:
    """Target output after blanking the k top-scored tokens, for k = 0..K; ``(B, K + 1)``.

        curve[i, k] = f_y(x_i^(k)),   x^(k) = x with its k highest-``scores`` positions blanked

    f_y is the probability (``score="prob"``) or the logit of y, the class predicted on the clean
    x (or the gold label), kept fixed along the curve. Only real positions outside
    ``skip_positions`` (CLS by default) are ever blanked; ties in ``scores`` go to the earlier
    position. ``most_important_first=False`` deletes the lowest-scored first (LeRF instead of MoRF).
    Blanking is ``blank_out``'s: the token becomes ``blank_id`` and, if ``mask_blank`` (default:
    iff ``blank_id == pad_id``), its attention-mask entry becomes 0.

    K = ``max_steps`` or, if None, the largest number of blankable positions in the batch; entries
    past a sample's own number of blankable positions are nan. float64, on ``scores``' device.
    Model in eval mode (flags restored), no gradients, inputs untouched.

    >>> import torch
    >>> def model(input_ids, attention_mask):  # logit 0 = 2 * (#real id 5) + (#real id 6)
    ...     real = attention_mask.bool()
    ...     n = 2.0 * ((input_ids == 5) & real).sum(-1) + ((input_ids == 6) & real).sum(-1)
    ...     return torch.stack([n, torch.zeros_like(n)], dim=-1)
    >>> ids, mask = torch.tensor([[2, 6, 5]]), torch.tensor([[1, 1, 1]])
    >>> deletion_curve(model, ids, mask, torch.tensor([[0.0, 0.1, 0.9]]), score="logit")
    tensor([[3., 1., 0.]], dtype=torch.float64)
    """
    attention_mask = _check_batch(input_ids, attention_mask)
    if scores.shape != input_ids.shape:
        raise ValueError(f"scores shape {tuple(scores.shape)} != input_ids shape {tuple(input_ids.shape)}")
    if target not in ("predicted", "gold") or score not in ("prob", "logit"):
        raise ValueError(f"bad target / score: {target!r} / {score!r}")
    if batch_size < 1 or (max_steps is not None and max_steps < 0):
        raise ValueError(f"need batch_size >= 1 and max_steps >= 0, got {batch_size} and {max_steps}")
    if mask_blank is None:
        mask_blank = blank_id == pad_id

    n, t = input_ids.shape
    eligible = attention_mask.bool().clone()  # (B, T)
    eligible[:, [p % t for p in skip_positions if -t <= p < t]] = False
    n_eligible = eligible.sum(dim=1)  # (B,)
    steps = int(n_eligible.max()) if max_steps is None and n > 0 else int(max_steps or 0)

    # rank[b, p] = order in which position p is deleted (0 first); ineligible positions come last.
    key = scores.detach().to(torch.float64).clone()
    key = key if most_important_first else -key
    key[~eligible.to(key.device)] = -torch.inf
    order = torch.argsort(key, dim=1, descending=True, stable=True)  # (B, T)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(t, device=order.device).expand(n, t))  # (B, T)
    rank = rank.to(input_ids.device)

    # One forward per (sample, k) with k <= min(K, n_eligible); k = 0 is the clean input.
    pairs = [(b, k) for b in range(n) for k in range(min(steps, int(n_eligible[b])) + 1)]
    curve = torch.full((n, steps + 1), torch.nan, dtype=torch.float64)
    labels_flat = None if labels is None else torch.as_tensor(labels).reshape(-1)
    with _eval_mode(model), torch.no_grad():
        classes = _clean_classes(model, input_ids, attention_mask, target, labels_flat, batch_size)  # (B,)
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            rows = torch.tensor([b for b, _ in chunk], device=input_ids.device)  # (c,)
            ks = torch.tensor([k for _, k in chunk], device=input_ids.device)  # (c,)
            drop = eligible[rows] & (rank[rows] < ks[:, None])  # (c, T)
            ids = torch.where(drop, torch.full_like(input_ids[rows], blank_id), input_ids[rows])
            mask = attention_mask[rows]
            if mask_blank:
                mask = torch.where(drop, torch.zeros_like(mask), mask)
            logits = _logits(model(input_ids=ids, attention_mask=mask))  # (c, C)
            values = logits.double().softmax(dim=-1) if score == "prob" else logits.double()
            picked = values.gather(1, classes.to(values.device)[rows.to(values.device), None])[:, 0]
            curve[rows.cpu(), ks.cpu()] = picked.cpu()
    return curve.to(scores.device)


def _clean_classes(model, input_ids, attention_mask, target, labels, batch_size) -> Tensor:
    """The class y per sample, (B,): argmax on the clean input, or the gold label."""
    out = []
    for start in range(0, input_ids.shape[0], batch_size):
        sl = slice(start, start + batch_size)
        logits = _logits(model(input_ids=input_ids[sl], attention_mask=attention_mask[sl]))
        out.append(_target_classes(logits, target, None if labels is None else labels[sl]))
    return torch.cat(out)
