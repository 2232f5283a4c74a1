"""The verb-number (agreement) classifier of Abnar & Zuidema (2020): a bidirectional GPT-2 encoder.

Pre-LayerNorm blocks with a GELU MLP (GPT-2), no causal mask, a ``<cls>`` token at position 0
whose final-layer state feeds a linear classifier (0 = singular/VBZ, 1 = plural/VBP).
After nanoGPT's ``model.py``, with the causal mask replaced by a key-padding mask and the
attention computed explicitly so the forward can return the probabilities.
Attention axes: ``(batch, layer, head, query, key)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnflow.models.output import ClassifierOutput, TransformerClassifier

__all__ = ["AgreementConfig", "AgreementTransformer"]


@dataclass
class AgreementConfig:
    """GPT-2's names and defaults; the authors' agreement model (Reflect ``small_gpt_v9``) used
    heavy dropout instead: embd_pdrop 0.2, attn_pdrop 0.6, resid_pdrop 0.4, initializer_range 0.05."""

    vocab_size: int = 10_004  # Linzen's 10k-word list + 4 specials; set from the Vocab when building
    block_size: int = 64  # longest Linzen prefix is 48 words, + <cls>
    n_layer: int = 6  # the paper
    n_head: int = 8  # the paper
    n_embd: int = 128  # the paper
    embd_pdrop: float = 0.1  # dropout on token + position embeddings
    attn_pdrop: float = 0.1  # dropout on the attention probabilities (before they weight the values)
    resid_pdrop: float = 0.1  # dropout on both residual branches (attention and MLP outputs)
    initializer_range: float = 0.02  # weights ~ N(0, std^2); residual projections std / sqrt(2 n_layer)
    n_classes: int = 2  # singular / plural
    bias: bool = True  # as GPT-2
    pad_id: int = 0  # Vocab.pad_id; used only to derive the mask when none is given
    append_eos: bool = False  # the input format it was trained on: <cls> + prefix (+ <eos>, the authors')


class SelfAttention(nn.Module):
    """Multi-head self-attention over all real keys (no causal mask)."""

    def __init__(self, config: AgreementConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head != 0:
            raise ValueError(f"n_embd ({config.n_embd}) must be divisible by n_head ({config.n_head})")
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        # (B, T, C) -> (B, H, T, D)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, T)
        keep = key_mask[:, None, None, :]  # (B, 1, 1, T)
        # finfo.min, not -inf: a row whose keys are all padding stays finite (it is zeroed below)
        scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
        att = F.softmax(scores, dim=-1).masked_fill(~keep, 0.0)  # (B, H, T, T); padded keys exactly 0
        y = self.attn_dropout(att) @ v  # (B, H, T, D)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y)), att


class MLP(nn.Module):
    def __init__(self, config: AgreementConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.resid_pdrop)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block, as GPT-2."""

    def __init__(self, config: AgreementConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, key_mask: Tensor) -> tuple[Tensor, Tensor]:
        a, att = self.attn(self.ln_1(x), key_mask)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, att


class AgreementTransformer(TransformerClassifier):
    """Bidirectional GPT-2-style encoder + linear classifier on the final ``<cls>`` state.

    ``input_ids`` must start with ``<cls>`` (``Vocab.encode`` does this). ``attention_mask``:
    1 = real token, 0 = padding; padded keys are masked out of every attention row, so padding
    never reaches a real position. With no mask, positions holding ``pad_id`` are masked, as in
    the authors' code (with ``inputs_embeds`` and no mask every position is real).

    >>> model = AgreementTransformer(AgreementConfig(vocab_size=10, n_layer=2, n_head=2, n_embd=8))
    >>> out = model(torch.tensor([[2, 5, 6, 0]]), output_attentions=True)
    >>> tuple(out.logits.shape), tuple(out.attentions.shape)
    ((1, 2), (1, 2, 2, 4, 4))
    """

    def __init__(self, config: AgreementConfig) -> None:
        super().__init__()
        self.config = config
        self.num_layers = config.n_layer
        self.num_heads = config.n_head
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.classifier = nn.Linear(config.n_embd, config.n_classes)
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=config.initializer_range / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def classify(self, input_ids, attention_mask, inputs_embeds, output_attentions) -> ClassifierOutput:
        tok = self.wte(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, C)
        B, T, _ = tok.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.config.block_size}")
        if attention_mask is not None:
            key_mask = attention_mask.to(device=tok.device).bool()  # (B, T)
        elif input_ids is not None:
            key_mask = input_ids != self.config.pad_id
        else:
            key_mask = torch.ones(B, T, dtype=torch.bool, device=tok.device)
        pos = torch.arange(T, device=tok.device)  # (T,)
        x = self.drop(tok + self.wpe(pos))  # (B, T, C)
        attentions = []
        for block in self.h:
            x, att = block(x, key_mask)
            if output_attentions:
                attentions.append(att)
        x = self.ln_f(x)
        logits = self.classifier(x[:, 0])  # (B, n_classes), from <cls> only
        stacked = torch.stack(attentions, dim=1) if output_attentions else None  # (B, L, H, T, T)
        return ClassifierOutput(logits=logits, attentions=stacked)
