"""Perturbation curves: the model's output as the top- (or bottom-) ranked tokens are taken away.

The input of the faithfulness scores in ``attnflow.metrics.faithfulness``: AOPC comprehensiveness
and sufficiency (DeYoung et al. 2020, ERASER; as ferret computes them) and the area under the
most- / least-relevant-first curves (Chefer et al. 2021, "Transformer Interpretability Beyond
Attention Visualization"). Not in Abnar & Zuidema 2020. ``random_scores`` gives the seeded random
ranking, the floor every method should beat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from attnflow.modes import eval_mode

from ._model import _check_batch, _logits
from .blank_out import PAD_ID

__all__ = [
    "CHEFER_FRACTIONS",
    "FERRET_FRACTIONS",
    "MODES",
    "ROUNDINGS",
    "perturbation_curve",
    "random_scores",
]

#: ferret's default ``removal_args["thresholds"]``, ``np.arange(0.1, 1.1, 0.1)``, as exact decimals.
FERRET_FRACTIONS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
#: Chefer et al.'s text perturbation steps (Transformer-MM-Explainability, lxmert/perturbation.py).
CHEFER_FRACTIONS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)

#: positive: remove the k top-ranked tokens (Chefer's positive test = ferret's comprehensiveness);
#: negative: remove the k bottom-ranked; sufficiency: keep only the k top-ranked, remove the rest.
MODES = ("positive", "negative", "sufficiency")
#: k = floor(q n) (ferret: ``int(percentage * len)``) or ceil(q n) (Chefer: n - ``int((1 - q) n)``).
ROUNDINGS = ("floor", "ceil")

# q * n is rounded as if computed exactly: 0.7 * 3 = 2.0999999999999996 in floats must floor to 2
# and ceil to 3 (the reference codes' own float slips, e.g. Chefer's int((1 - 0.8) * 5) = 0, are not
# reproduced). Fractions are given with far fewer than 9 significant digits.
_COUNT_TOL = 1e-9


def perturbation_curve(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor | None,
    scores: Tensor,
    *,
    mode: Literal["positive", "negative", "sufficiency"] = "positive",
    fractions: Sequence[float] = FERRET_FRACTIONS,
    rounding: Literal["floor", "ceil"] = "floor",
    replace_id: int | None = None,
    mask_replaced: bool | None = None,
    pad_id: int = PAD_ID,
    keep_positions: Sequence[int] = (0,),
    batch_size: int = 256,
) -> dict[str, np.ndarray]:
    """Probability of the clean prediction after perturbing a fraction q of each input's tokens.

    Sample i has n_i removable tokens: its real tokens (``attention_mask`` 1) except
    ``keep_positions`` (CLS by default; add -1 for a final SEP), which are always kept. Index p in
    ``keep_positions`` is the p-th real token of the sample (negative counts from its last real
    token), i.e. the position itself in a right-padded batch. For each fraction q_j,

        k_ij = floor(q_j n_i)  (rounding="floor", ferret)  or  ceil(q_j n_i)  (rounding="ceil", Chefer)

    and the ranking of the removable tokens by ``scores`` (any method; higher = more important;
    ties go to the earlier position, in both directions) selects k_ij of them:

        mode="positive":     remove the k top-ranked        (Chefer "positive", ferret/ERASER comprehensiveness)
        mode="negative":     remove the k bottom-ranked     (Chefer "negative")
        mode="sufficiency":  keep only the k top-ranked     (ferret/ERASER sufficiency): remove n - k

    The score is p(y_i | x_ij), y_i the class predicted on the clean x_i, plus whether the
    perturbed input is still predicted as y_i (accuracy curves).

    Departures from ferret's defaults, on purpose: every removable token is ranked (ferret's
    ``only_pos=True`` never selects a token scored <= 0; ours are mostly >= 0 and a 0 is still a
    rank), ties go to the earlier position (ferret's ``argsort()[-k:][::-1]`` prefers the later
    one), and q n is rounded as if exact (see ``_COUNT_TOL``).

    Removing is *deleting* by default (``replace_id=None``, as ferret's ``remove_tokens=True`` and
    Chefer's code): the other tokens close up in their order, the sequence gets shorter, and each
    chunk is re-padded on the right with ``pad_id``. With ``replace_id`` (the PAD, UNK or MASK id)
    the token is replaced in place instead; ``mask_replaced`` also zeroes its attention-mask entry
    (default: iff ``replace_id == pad_id``, as ``blank_out``'s ``mask_blank``).

    The clean inputs, then all N x J perturbed copies, go through the model in chunks of
    ``batch_size``; eval mode (flags restored), no gradients, inputs untouched. Probabilities are
    a float64 softmax of the logits.

    Returns numpy arrays: ``fractions`` (J,), ``n_removable`` (N,), ``k`` (N, J) int64 (tokens
    removed; tokens *kept* for sufficiency), ``prob`` (N, J) float64, ``predicted`` (N, J) int64,
    ``correct`` (N, J) bool (predicted == target), ``clean_prob`` (N,), ``target`` (N,) int64.

    >>> def model(input_ids, attention_mask):  # logit 0 = 2 * (#id 5) + (#id 6); logit 1 = 0
    ...     n = 2.0 * (input_ids == 5).sum(-1) + (input_ids == 6).sum(-1)
    ...     return torch.stack([n, torch.zeros_like(n)], dim=-1)
    >>> ids, scores = torch.tensor([[2, 6, 5]]), torch.tensor([[0.0, 0.1, 0.9]])
    >>> out = perturbation_curve(model, ids, None, scores, fractions=(0.0, 0.5, 1.0))
    >>> out["k"], out["prob"].round(3)  # floor(.5 * 2) = 1: delete the 5 (logit 3 -> 1 -> 0)
    (array([[0, 1, 2]]), array([[0.953, 0.731, 0.5  ]]))
    """
    attention_mask = _check_batch(input_ids, attention_mask)
    if scores.shape != input_ids.shape:
        raise ValueError(f"scores shape {tuple(scores.shape)} != input_ids shape {tuple(input_ids.shape)}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    q = _check_fractions(fractions)
    if mask_replaced is None:
        mask_replaced = replace_id is not None and replace_id == pad_id

    n = input_ids.shape[0]
    real = attention_mask.detach().cpu().numpy() != 0  # (N, T)
    removable = _removable(real, keep_positions)  # (N, T)
    key = scores.detach().to("cpu", torch.float64).numpy()  # (N, T)
    if np.isnan(key[removable]).any():
        raise ValueError("scores are nan at a removable position: no ranking")
    n_removable = removable.sum(axis=1)  # (N,)
    k = _counts(n_removable, q, rounding)  # (N, J)
    rank = _selection_rank(key, removable, least_first=mode == "negative")  # (N, T)

    dev = input_ids.device
    real_t, removable_t = torch.as_tensor(real, device=dev), torch.as_tensor(removable, device=dev)
    rank_t, k_t = torch.as_tensor(rank, device=dev), torch.as_tensor(k, device=dev)
    with eval_mode(model), torch.no_grad():
        clean_prob, target = np.empty(n), np.empty(n, dtype=np.int64)
        for start in range(0, n, batch_size):
            sl = slice(start, start + batch_size)
            logits = _logits(model(input_ids=input_ids[sl], attention_mask=attention_mask[sl]))  # (c, C)
            probs = logits.detach().double().softmax(dim=-1).cpu().numpy()  # (c, C)
            target[sl] = probs.argmax(axis=1)
            clean_prob[sl] = probs[np.arange(len(probs)), target[sl]]

        n_frac = len(q)
        prob = np.empty((n, n_frac))
        predicted = np.empty((n, n_frac), dtype=np.int64)
        for start in range(0, n * n_frac, batch_size):
            flat = torch.arange(start, min(start + batch_size, n * n_frac), device=dev)  # (c,)
            rows, cols = flat // n_frac, flat % n_frac  # (c,), (c,): sample, fraction
            selected = removable_t[rows] & (rank_t[rows] < k_t[rows, cols][:, None])  # (c, T)
            removed = removable_t[rows] & ~selected if mode == "sufficiency" else selected  # (c, T)
            if replace_id is None:
                ids, mask = _delete(input_ids[rows], real_t[rows] & ~removed, pad_id, attention_mask.dtype)
            else:
                ids = torch.where(removed, torch.full_like(input_ids[rows], replace_id), input_ids[rows])
                mask = attention_mask[rows]
                if mask_replaced:
                    mask = torch.where(removed, torch.zeros_like(mask), mask)
            logits = _logits(model(input_ids=ids, attention_mask=mask))  # (c, C)
            probs = logits.detach().double().softmax(dim=-1).cpu().numpy()  # (c, C)
            r, c = rows.cpu().numpy(), cols.cpu().numpy()
            prob[r, c] = probs[np.arange(len(r)), target[r]]
            predicted[r, c] = probs.argmax(axis=1)
    return {
        "fractions": q,
        "n_removable": n_removable.astype(np.int64),
        "k": k,
        "prob": prob,
        "predicted": predicted,
        "correct": predicted == target[:, None],
        "clean_prob": clean_prob,
        "target": target,
    }


def random_scores(
    attention_mask: Tensor, *, seed: int, sample_index: Sequence[int] | Tensor | None = None
) -> Tensor:
    """Seeded random scores: each sample's real tokens get a random permutation of 0..T_i - 1.

        scores[b, j-th real token] = perm_i[j],   perm_i = default_rng([seed, i]).permutation(T_i)

    where i = ``sample_index[b]`` (default b) is the sample's index in the whole data set and T_i
    its number of real tokens (``attention_mask`` 1); padded positions get 0. perm_i depends on
    (seed, i, T_i) only, so a sample gets the same ranking in any batch, at any batch size or
    padding. No ties; restricted to any subset (e.g. the removable tokens) the order is uniformly
    random. The floor of the faithfulness scores: a method should beat it.

    Returns ``(B, T)`` float64 on the mask's device.

    >>> s = random_scores(torch.tensor([[1, 1, 1, 0]]), seed=0)
    >>> sorted(s[0, :3].tolist()), s[0, 3].item()
    ([0.0, 1.0, 2.0], 0.0)
    """
    if attention_mask.ndim != 2:
        raise ValueError(f"attention_mask must be (B, T), got shape {tuple(attention_mask.shape)}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    real = attention_mask.detach().cpu().numpy() != 0  # (B, T)
    b = real.shape[0]
    index = np.arange(b) if sample_index is None else np.asarray(torch.as_tensor(sample_index).cpu())
    if index.shape != (b,) or not np.issubdtype(index.dtype, np.integer) or (index < 0).any():
        raise ValueError(f"sample_index must be {b} ints >= 0, got {sample_index!r}")
    out = np.zeros(real.shape)
    for row in range(b):
        cols = np.flatnonzero(real[row])
        out[row, cols] = np.random.default_rng([int(seed), int(index[row])]).permutation(len(cols))
    return torch.as_tensor(out, device=attention_mask.device)


def _check_fractions(fractions: Sequence[float]) -> np.ndarray:
    q = np.asarray(fractions, dtype=np.float64)
    if q.ndim != 1 or q.size == 0:
        raise ValueError(f"fractions must be a non-empty 1-D sequence, got {fractions!r}")
    if not ((q >= 0) & (q <= 1)).all() or (np.diff(q) <= 0).any():
        raise ValueError(f"fractions must increase strictly within [0, 1], got {q.tolist()}")
    return q


def _removable(real: np.ndarray, keep_positions: Sequence[int]) -> np.ndarray:
    """Real positions minus the kept ones; p in ``keep_positions`` indexes each sample's real tokens."""
    removable = real.copy()  # (N, T)
    for row in range(real.shape[0]):
        cols = np.flatnonzero(real[row])
        keep = [cols[p] for p in keep_positions if -len(cols) <= p < len(cols)]
        removable[row, keep] = False
    return removable


def _counts(n_removable: np.ndarray, q: np.ndarray, rounding: str) -> np.ndarray:
    """k[i, j] = floor or ceil of q_j * n_i, as if computed exactly; (N, J) int64."""
    x = q[None, :] * n_removable[:, None]  # (N, J)
    k = np.floor(x + _COUNT_TOL) if rounding == "floor" else np.ceil(x - _COUNT_TOL)
    return np.clip(k, 0, n_removable[:, None]).astype(np.int64)


def _selection_rank(key: np.ndarray, removable: np.ndarray, *, least_first: bool) -> np.ndarray:
    """rank[i, p] = how many removable tokens are selected before p (0 = first); others get T.

    Descending ``key`` (ascending if ``least_first``); a stable sort, so ties go to the earlier
    position either way.
    """
    n, t = key.shape
    sort_key = np.where(removable, key if least_first else -key, np.inf)  # (N, T)
    order = np.argsort(sort_key, axis=1, kind="stable")  # (N, T)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(t), (n, t)), axis=1)
    return np.where(removable, rank, t)


def _delete(ids: Tensor, keep: Tensor, pad_id: int, mask_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Drop the positions where ``keep`` is False, close up the rest in order, right-pad; (c, T')."""
    lengths = keep.sum(dim=1)  # (c,)
    if bool((lengths == 0).any()):
        raise ValueError("deletion leaves an empty input: keep a position (keep_positions) or use replace_id")
    width = int(lengths.max())
    order = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)[:, :width]  # (c, T'): kept first
    new_mask = torch.arange(width, device=ids.device)[None, :] < lengths[:, None]  # (c, T')
    new_ids = torch.where(new_mask, ids.gather(1, order), torch.full_like(order, pad_id, dtype=ids.dtype))
    return new_ids, new_mask.to(mask_dtype)
