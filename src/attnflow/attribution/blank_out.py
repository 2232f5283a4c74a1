"""Blank-out importance (Abnar & Zuidema 2020, section 4): replace one token, see the output move."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from attnflow.modes import eval_mode

from ._model import _check_batch, _logits, _target_classes

__all__ = ["PAD_ID", "blank_out"]

#: The project's ``<pad>`` id (``attnflow.data.vocab.Vocab.pad_id``); the authors' blank token.
PAD_ID = 0


def blank_out(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    blank_id: int = PAD_ID,
    mask_blank: bool | None = None,
    pad_id: int = PAD_ID,
    target: Literal["predicted", "gold"] = "predicted",
    labels: Tensor | None = None,
    score: Literal["prob", "logit"] = "prob",
    skip_positions: Sequence[int] = (0,),
    batch_size: int = 256,
) -> Tensor:
    """Blank-out importance of every position: how much the target output moves without that token.

    For sample x and each real position t not in ``skip_positions`` (negative positions count back
    from each sample's last real token: -1 is an ``<eos>`` or ``[SEP]``), x' is x with token t
    replaced by ``blank_id``, and

        score(t) = | p(y | x) - p(y | x') |        (score="prob", the authors' choice)
        score(t) = | z_y(x) - z_y(x') |            (score="logit", z = logits)

    where y is the class the model predicts for the clean x (``target="predicted"``, the authors')
    or the gold label (``target="gold"``). Skipped and padded positions get 0.

    Blank token: the notebook that printed the paper's Tables 1-2 (Reflect d28ddd5) blanked every
    position, CLS included, with UNK and no effective mask (its 0/1 "mask" was added to the logits);
    the final notebook skipped CLS and blanked with PAD, masked through its ``ids != pad`` mask.
    ``mask_blank`` zeroes the blanked position in the attention mask, so blanking *deletes* the
    token as a key (positions of the others do not shift); ``mask_blank=None`` (default) masks iff
    ``blank_id == pad_id``.

    The perturbed copies (all positions of several samples) go through the model in batches of
    ``batch_size`` under ``torch.no_grad()`` with the model in eval mode; every submodule gets its
    own ``training`` flag back afterwards and the inputs are not modified.

    Returns a ``(B, T)`` tensor in the logits' dtype, on the logits' device.

    >>> import torch
    >>> def model(input_ids, attention_mask):  # logit 0 = number of real tokens with id 5
    ...     n = ((input_ids == 5) & attention_mask.bool()).sum(-1).float()
    ...     return torch.stack([n, torch.zeros_like(n)], dim=-1)
    >>> ids, mask = torch.tensor([[2, 5, 7, 0]]), torch.tensor([[1, 1, 1, 0]])
    >>> blank_out(model, ids, mask, blank_id=0, score="logit")
    tensor([[0., 1., 0., 0.]])
    >>> blank_out(model, ids, mask, blank_id=0, score="logit", skip_positions=(-2,))  # skips the 5
    tensor([[0., 0., 0., 0.]])
    """
    attention_mask = _check_batch(input_ids, attention_mask)
    if target not in ("predicted", "gold"):
        raise ValueError(f"target must be 'predicted' or 'gold', got {target!r}")
    if score not in ("prob", "logit"):
        raise ValueError(f"score must be 'prob' or 'logit', got {score!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if mask_blank is None:
        mask_blank = blank_id == pad_id

    n, t = input_ids.shape
    # Positions that get a perturbed copy: real tokens, minus the skipped ones (CLS by default).
    eligible = _eligible(attention_mask, skip_positions)  # (B, T)
    rows, cols = eligible.nonzero(as_tuple=True)  # (P,), (P,): one perturbed copy per pair

    def _scores(logits: Tensor, classes: Tensor) -> Tensor:  # (b, C), (b,) -> (b,)
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # a probability difference needs more than 3 significant digits
        values = logits.softmax(dim=-1) if score == "prob" else logits
        return values.gather(1, classes[:, None])[:, 0]

    labels_flat = None if labels is None else torch.as_tensor(labels).reshape(-1)
    with eval_mode(model), torch.no_grad():
        clean, classes = [], []
        for start in range(0, n, batch_size):
            sl = slice(start, start + batch_size)
            logits = _logits(model(input_ids=input_ids[sl], attention_mask=attention_mask[sl]))
            lab = None if labels_flat is None else labels_flat[sl]
            cls = _target_classes(logits, target, lab)
            clean.append(_scores(logits, cls))
            classes.append(cls)
        if n == 0:
            return torch.zeros((0, t))
        clean_score, target_cls = torch.cat(clean), torch.cat(classes)  # (B,), (B,)
        dev = clean_score.device
        out = torch.zeros((n, t), dtype=clean_score.dtype, device=dev)
        rows_d, cols_d = rows.to(dev), cols.to(dev)

        for start in range(0, rows.numel(), batch_size):
            r, c = rows[start : start + batch_size], cols[start : start + batch_size]  # (b,)
            ids = input_ids[r].clone()  # (b, T): fresh copies, the caller's tensor is never touched
            ids[torch.arange(r.numel(), device=ids.device), c] = blank_id
            mask = attention_mask[r].clone()  # (b, T)
            if mask_blank:
                mask[torch.arange(r.numel(), device=ids.device), c] = 0
            logits = _logits(model(input_ids=ids, attention_mask=mask)).to(dev)
            rd, cd = rows_d[start : start + batch_size], cols_d[start : start + batch_size]
            out[rd, cd] = (clean_score[rd] - _scores(logits, target_cls[rd])).abs()
    return out


def _eligible(attention_mask: Tensor, skip_positions: Sequence[int]) -> Tensor:
    """(B, T) bool: real positions not skipped; a negative skip counts back from each row's last
    real token (right padding), so -1 is that row's end marker whatever its length."""
    eligible = attention_mask.bool().clone()  # (B, T)
    n = eligible.shape[0]
    lengths = attention_mask.long().sum(-1)  # (B,)
    rows = torch.arange(n, device=eligible.device)
    for p in skip_positions:
        col = lengths + p if p < 0 else torch.full_like(lengths, p)  # (B,)
        ok = (col >= 0) & (col < lengths)
        eligible[rows[ok], col[ok]] = False
    return eligible
