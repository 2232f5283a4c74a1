"""The one bridge from a model to tensors: run a classifier and keep what the explainers need.

The model follows the ``attnflow.models`` interface: ``model(input_ids, attention_mask,
output_attentions=True)`` returns logits ``(B, C)`` and attentions ``(B, L, H, T, T)``
(axis order batch, layer, head, query, key). Each sample's attentions are cut to its own length
``T_i`` (padding dropped), so downstream code sees ``(L, H, T_i, T_i)`` arrays whose rows are
probability distributions over real tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

__all__ = ["Captured", "capture", "length_batches", "pad_batch"]


@dataclass
class Captured:
    """Per-sample model outputs; lists are aligned with the input texts."""

    input_ids: list[np.ndarray]  # (T_i,) int64
    tokens: list[list[str]]
    attentions: list[np.ndarray]  # (L, H, T_i, T_i)
    probs: np.ndarray  # (N, C) float32

    @property
    def predictions(self) -> np.ndarray:
        return self.probs.argmax(axis=1)

    @property
    def lengths(self) -> np.ndarray:
        return np.array([len(ids) for ids in self.input_ids])


@torch.no_grad()
def capture(
    model: torch.nn.Module,
    encoder: Any,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_length: int | None = None,
    dtype: np.dtype | str = np.float32,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> Captured:
    """Run ``model`` over ``texts`` in length-sorted batches and keep per-sample attentions.

    ``encoder.encode(texts, max_length)`` must return ``input_ids`` and ``attention_mask``
    ``(B, T)`` and ``tokens``. The model is put in eval mode and restored afterwards.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    was_training = model.training
    model.eval()
    n = len(texts)
    # Encode once to learn the lengths, then batch similar lengths together (less padding).
    lengths = [len(ids) for ids in encoder.encode_ids(list(texts), max_length=max_length)]
    input_ids: list[np.ndarray | None] = [None] * n
    tokens: list[list[str] | None] = [None] * n
    attentions: list[np.ndarray | None] = [None] * n
    probs: np.ndarray | None = None
    try:
        for idx in tqdm(
            length_batches(lengths, batch_size), desc="capture", disable=not progress, leave=False
        ):
            batch = encoder.encode([texts[i] for i in idx], max_length=max_length)
            ids = batch["input_ids"].to(device)
            mask = batch["attention_mask"].to(device)
            out = model(ids, mask, output_attentions=True)
            if out.attentions is None:
                raise ValueError("the model returned no attentions; load it with eager attention")
            p = torch.softmax(out.logits.float(), dim=-1).cpu().numpy()
            if probs is None:
                probs = np.zeros((n, p.shape[1]), dtype=np.float32)
            att = out.attentions.float().cpu().numpy()  # (B, L, H, T, T)
            real = mask.sum(dim=1).cpu().numpy()
            for row, i in enumerate(idx):
                t = int(real[row])
                input_ids[i] = ids[row, :t].cpu().numpy().astype(np.int64)
                tokens[i] = list(batch["tokens"][row][:t])
                attentions[i] = att[row, :, :, :t, :t].astype(dtype)
                probs[i] = p[row]
    finally:
        model.train(was_training)
    return Captured(  # type: ignore[arg-type]
        input_ids, tokens, attentions, probs if probs is not None else np.zeros((0, 2), np.float32)
    )


def pad_batch(rows: Sequence[np.ndarray], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id sequences into ``input_ids`` and ``attention_mask`` ``(B, T_max)``.

    >>> ids, mask = pad_batch([np.array([2, 5, 6]), np.array([2, 7])], pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[2, 5, 6], [2, 7, 0]], [[1, 1, 1], [1, 1, 0]])
    """
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(np.asarray(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def length_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Indices grouped into batches of similar length (stable), covering every index once.

    >>> [b.tolist() for b in length_batches([5, 1, 3, 2], 2)]
    [[1, 3], [2, 0]]
    """
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
