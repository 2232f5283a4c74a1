"""Tiny hand-made classifiers with the ``attnflow.models`` interface, for the attribution tests.

Interface (copied, not imported, so these tests do not depend on the model package):
``forward(input_ids=None, attention_mask=None, *, inputs_embeds=None, output_attentions=False)
-> ClassifierOutput(logits (B, C), attentions)`` and ``get_input_embeddings() -> nn.Embedding``.
All models are float64 so hand-computed values can be compared tightly.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn


@dataclass
class ClassifierOutput:
    logits: Tensor
    attentions: Tensor | None = None


class BagModel(nn.Module):
    """logits = head( sum_t mask_t * x_t ), or head(x_k) when ``readout=k`` (reads one position only)."""

    def __init__(self, emb: Tensor, head: Tensor, readout: str | int = "bag"):
        super().__init__()
        self.emb = nn.Embedding.from_pretrained(emb.double(), freeze=False)  # (V, D)
        self.head = nn.Parameter(head.double())  # (C, D)
        self.readout = readout

    def get_input_embeddings(self) -> nn.Embedding:
        return self.emb

    def forward(self, input_ids=None, attention_mask=None, *, inputs_embeds=None, output_attentions=False):
        x = self.emb(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, D)
        if attention_mask is None:
            attention_mask = torch.ones(x.shape[:2], dtype=torch.long)
        if self.readout == "bag":
            pooled = (x * attention_mask[..., None].to(x.dtype)).sum(1)  # (B, D)
        else:
            pooled = x[:, self.readout]  # (B, D)
        return ClassifierOutput(logits=pooled @ self.head.T)


class PositionLinear(nn.Module):
    """logits_c = sum_t mask_t * <W[c, t], x_t>: the gradient of logit c w.r.t. x_t is W[c, t]."""

    def __init__(self, emb: Tensor, w: Tensor):
        super().__init__()
        self.emb = nn.Embedding.from_pretrained(emb.double(), freeze=False)  # (V, D)
        self.w = nn.Parameter(w.double())  # (C, T, D)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.emb

    def forward(self, input_ids=None, attention_mask=None, *, inputs_embeds=None, output_attentions=False):
        x = self.emb(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, D)
        x = x * attention_mask[..., None].to(x.dtype)
        return ClassifierOutput(logits=torch.einsum("btd,ctd->bc", x, self.w))


class TinyTransformer(nn.Module):
    """One encoder layer with dropout (so eval mode matters), padding mask from attention_mask, CLS head."""

    def __init__(self, vocab: int = 12, dim: int = 8, max_len: int = 8, n_classes: int = 2, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(max_len, dim))
        self.layer = nn.TransformerEncoderLayer(
            dim, nhead=2, dim_feedforward=16, dropout=0.5, batch_first=True
        )
        self.head = nn.Linear(dim, n_classes)
        self.double()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.emb

    def forward(self, input_ids=None, attention_mask=None, *, inputs_embeds=None, output_attentions=False):
        x = self.emb(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, D)
        x = x + self.pos[: x.shape[1]]
        h = self.layer(x, src_key_padding_mask=attention_mask == 0)
        return ClassifierOutput(logits=self.head(h[:, 0]))


@pytest.fixture
def bag_model():
    return BagModel


@pytest.fixture
def position_linear():
    return PositionLinear


@pytest.fixture
def tiny_transformer():
    return TinyTransformer


@pytest.fixture
def ragged_batch():
    """5 samples, CLS (id 2) first, real lengths 5, 3, 4, 2, 5 (pad id 0)."""
    ids = torch.tensor(
        [
            [2, 4, 5, 6, 7],
            [2, 8, 9, 0, 0],
            [2, 10, 4, 11, 0],
            [2, 6, 0, 0, 0],
            [2, 11, 10, 9, 8],
        ]
    )
    return ids, (ids != 0).long()
