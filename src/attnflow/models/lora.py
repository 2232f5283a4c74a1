"""Low-rank adapters (Hu et al. 2021, "LoRA") and the delta form the packaged classifier ships.

A wrapped linear layer computes

    y = W x + b + (alpha / r) · B A x,      A ∈ R^{r×in} (random, scaled 1/√in), B ∈ R^{out×r} (zero at start)

with W and b frozen. After training, :func:`delta_tensors` writes what changed: each layer's factors
``<name>.lora_A`` = A and ``<name>.lora_B`` = (alpha / r) · B (the scale folded into B), and every other
trained parameter in full, under the plain model's names. :func:`attnflow.models.minilm_sst2.apply_delta`
merges that back into an unwrapped model, W' = W + B A, so the merged model computes what the adapted
one did (the round trip is tested in ``tests/unit/models/test_lora.py``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["ENCODER_LINEARS", "LoRALinear", "add_lora", "delta_tensors"]

# the linear layers of a BERT encoder block that get adapters (name suffixes, below "encoder.layer.")
ENCODER_LINEARS = ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")


class LoRALinear(nn.Module):
    """y = W x + b + (alpha / r) B A x, with W, b frozen copies of ``base`` (B starts at zero, so the
    wrapped layer starts as ``base``)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        if rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {rank}")
        self.base = base
        self.base.weight.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.T) @ self.lora_B.T * self.scale


def add_lora(
    model: nn.Module, rank: int, alpha: float, targets: tuple[str, ...] = ENCODER_LINEARS
) -> dict[str, LoRALinear]:
    """Wrap, in place, every ``nn.Linear`` below ``encoder.layer.`` whose name ends with one of
    ``targets``; returns the wrappers by the wrapped layer's full name."""
    wrapped = {}
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and "encoder.layer." in full and full.endswith(targets):
                lora = LoRALinear(child, rank, alpha)
                setattr(module, child_name, lora)
                wrapped[full] = lora
    return wrapped


def delta_tensors(model: nn.Module, wrapped: dict[str, LoRALinear]) -> dict[str, torch.Tensor]:
    """What training changed, under the plain model's names: each wrapper's A and (alpha / r) B, and
    every other parameter that requires grad, in full."""
    out = {}
    for name, lora in wrapped.items():
        out[f"{name}.lora_A"] = lora.lora_A.detach().clone().contiguous()
        out[f"{name}.lora_B"] = (lora.lora_B.detach() * lora.scale).contiguous()
    for name, p in model.named_parameters():
        if p.requires_grad and ".lora_" not in name:
            out[name.replace(".base.", ".")] = p.detach().clone().contiguous()
    return out
