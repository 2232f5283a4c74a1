"""What the streaming capture (`attnflow.stream`) keeps while the model runs: `StreamState`, whose
per-method accumulators fold each layer's head mean W(l) into the maps (raw: W(l)[rows]; rollout: the
running product Ã(l) = A(l) Ã(l-1); flow: A(l) in float64 on the host; chefer and grad_sam: ∇A reduced
over heads as the backward produces it), and the block operations they use (sink handling, the
blocked lower-triangular product)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnflow.explain.torch_ops import mix_residual, normalize_rows

__all__ = [
    "BLOCK_BYTES",
    "FLOW_PACKED_BYTES",
    "GPU_BLOCK_BYTES",
    "GPU_BLOCK_SHARE",
    "GRAD_STREAM_METHODS",
    "STREAM_METHODS",
    "TRIL_BLOCK",
    "StreamState",
    "block_bytes_for",
    "handle_sinks",
    "tril_matmul",
]

# The methods a stream can compute: they need the head mean of each layer and nothing else.
STREAM_METHODS = ("raw", "rollout", "flow")
# The gradient methods whose ∇A is reduced over heads as the backward produces each layer.
GRAD_STREAM_METHODS = ("chefer", "grad_sam")
# The model's eager attention runs over blocks of query rows whose probabilities take at most about
# this many bytes, so no (B, H, T, T) block of a long input is ever formed.
BLOCK_BYTES = 16 * 2**20
# On a GPU each block costs a handful of kernel launches whatever its size: 16 MiB blocks of an
# 8,192-token layer of 32 heads are 10 query rows, 820 blocks a layer, and the launches were the
# whole cost (rollout with sinks of Llama-3-8B's shape at 8,192 tokens: 41 s on an H200). There a
# block may take GPU_BLOCK_SHARE of the free device memory, at most GPU_BLOCK_BYTES
# (`block_bytes_for`).
GPU_BLOCK_BYTES = 2 * 2**30
GPU_BLOCK_SHARE = 8
# Above this many bytes of dense capacities per sample, a causal model's unpadded batch keeps only
# the lower triangles (`attnflow.explain.flow.flow_rows_packed`: one thread, no reversed copy, half
# the memory, 2-9x faster on last-row flow; its values equal the dense solver's to ~1e-14, not to
# the bit, so the short inputs of the study keep the dense path and its numbers). 32 MiB: SmolLM2's
# 30 layers from 375 tokens, GPT-2's 12 from 592.
FLOW_PACKED_BYTES = 2**25
# Causal rollout multiplies lower-triangular matrices in blocks of this many rows.
TRIL_BLOCK = 256


def block_bytes_for(device: Any) -> int:
    """The default block size on ``device``: BLOCK_BYTES on the CPU (cache-sized); on CUDA the free
    device memory / GPU_BLOCK_SHARE, between BLOCK_BYTES and GPU_BLOCK_BYTES.

    >>> block_bytes_for("cpu") == BLOCK_BYTES
    True
    """
    device = torch.device(device)
    if device.type != "cuda":
        return BLOCK_BYTES
    free, _ = torch.cuda.mem_get_info(device)
    return int(min(GPU_BLOCK_BYTES, max(BLOCK_BYTES, free // GPU_BLOCK_SHARE)))


@dataclass
class StreamState:
    """What the stream keeps while the model runs; `observe` is called once per layer, in order.

    rows: (B, R) long, the query positions explained in each sample; valid: (B, T) bool, the real
    tokens; methods: a subset of STREAM_METHODS; residual: r of A(l); dtype: the accumulation type;
    flow_layers: 0-based layers whose rows are flow sources (None = every layer).
    """

    rows: torch.Tensor
    valid: torch.Tensor
    methods: tuple[str, ...]
    n_layers: int
    residual: float = 0.5
    dtype: torch.dtype = torch.float32
    layer: int = 0
    raw: list[torch.Tensor] = field(default_factory=list)  # per layer (B, R, T)
    rollout: list[torch.Tensor] = field(default_factory=list)  # per layer (B, R, T)
    running: torch.Tensor | None = None  # Ã(l) (B, T, T)
    caps: np.ndarray | None = None  # (B, L, T, T) float64 A(l), for flow; packed: (B, L, T (T + 1) / 2)
    packed: bool = False  # caps holds a causal model's lower triangles (see FLOW_PACKED_BYTES)
    block_bytes: int = BLOCK_BYTES
    causal: bool = False  # every layer's A so far is lower triangular (checked on each layer)
    grad_methods: tuple[str, ...] = ()  # of GRAD_STREAM_METHODS: hooks reduce each layer's ∇A over heads
    abar: torch.Tensor | None = None  # chefer: Ā(l) = mean_h[(∇A ⊙ A)⁺], (B, L, T, T)
    grad_sam: torch.Tensor | None = None  # grad_sam: G(l)[rows] = mean_h[ReLU(∇A) ⊙ A][rows], (B, L, R, T)
    first: list = field(default_factory=list)  # layer 1's (rows, weights) blocks: the backward's inputs
    # grad methods: each block's probabilities recomputed in the backward (torch.utils.checkpoint)
    # instead of saved, so no layer's (B, H, T, T) is held between the forward and the backward;
    # `first` then holds layer 1's (rows, query block) and its hooks fire like the others'
    recompute: bool = True
    # attention sinks (attnflow.explain.causal): each head's attention on its sink keys is handled
    # by sink_mode ("diagonal" / "drop") before the head mean; (B, L, H, T) bool, None = no sinks
    sink_keys: torch.Tensor | None = None
    sink_mode: str = "none"
    # sink scores (`stream_sink_scores`): per layer the attention each key gets from the other rows
    # that see it, summed, (B, H, T); and whether every entry above the diagonal is 0 (causal)
    scores: list | None = None
    upper_zero: bool = True

    @property
    def full(self) -> bool:
        return bool(self.valid.all())

    def heads(self, weights: torch.Tensor, queries: slice) -> torch.Tensor:
        """W = mean over heads of one block of query rows, (B, H, q, T) -> (B, q, T), padding 0."""
        w = weights.detach()
        if not self.full:
            valid = self.valid.to(w.device)
            pair = valid[:, None, queries, None] & valid[:, None, None, :]  # (B, 1, q, T)
            w = w.masked_fill(~pair, 0.0)
        if w.dtype in (torch.float16, torch.bfloat16):  # rows off by up to 2^-8: rescaled, as the
            w = normalize_rows(w.to(self.dtype), inplace=True)  # classic path does for low precision
        if self.sink_keys is not None and self.sink_mode != "none":
            keys = self.sink_keys[:, self.layer].to(w.device)  # (B, H, T)
            w = handle_sinks(w.to(self.dtype), keys, queries.start, self.sink_mode)
        return w.mean(dim=1, dtype=self.dtype)

    def score(self, weights: torch.Tensor, queries: slice) -> None:
        """Add one block's attention to each key from the other real rows, (B, H, q, T) -> (B, H, T)."""
        w = weights.detach().to(torch.float64)
        if not self.full:
            valid = self.valid.to(w.device)
            w = w.masked_fill(~(valid[:, None, queries, None] & valid[:, None, None, :]), 0.0)
        q = w.shape[2]
        k, i = (
            torch.arange(q, device=w.device),
            torch.arange(queries.start, queries.start + q, device=w.device),
        )
        total = w.sum(dim=2)  # (B, H, T)
        total[:, :, i] -= w[:, :, k, i]  # a row's attention to itself is not sink attention
        self.upper_zero &= bool((w.triu(queries.start + 1) == 0).all())  # every layer, as is_causal
        if len(self.scores) == self.layer:
            self.scores.append(total)
        else:
            self.scores[self.layer] += total

    def observe(self, w: torch.Tensor) -> None:
        """Fold one layer's head mean W(l) (B, T, T) into the maps; called once per layer, in order."""
        if self.layer >= self.n_layers:
            raise RuntimeError(
                f"the model ran more attention layers than its config's {self.n_layers}: streaming "
                "capture supports encoder-only and decoder-only models"
            )
        take = self.rows.to(w.device)[:, :, None].expand(-1, -1, w.shape[-1])  # (B, R, T)
        if "raw" in self.methods:
            self.raw.append(torch.gather(w, 1, take))
        if "rollout" in self.methods or "flow" in self.methods:
            a = mix_residual(w, self.valid.to(w.device), self.residual)  # (B, T, T)
            del w
            if "rollout" in self.methods:
                if self.running is None:
                    self.causal = bool((a.triu(1) == 0).all())
                    self.running = a
                else:
                    if self.causal and bool(a.triu(1).any()):  # checked on every layer, not assumed
                        self.causal = False
                        warnings.warn(
                            f"streaming rollout: layer {self.layer + 1} attends to later positions although "
                            "the layers before it are causal; rollout takes full matrix products from "
                            "this layer on (the values stay exact)",
                            RuntimeWarning,
                            stacklevel=2,
                        )
                    self.running = tril_matmul(a, self.running) if self.causal else a @ self.running
                self.rollout.append(torch.gather(self.running, 1, take))
            if "flow" in self.methods:
                self.keep_caps(a)
        self.layer += 1

    def keep_caps(self, a: torch.Tensor) -> None:
        """Keep this layer's A (B, T, T) in float64 on the host for the flow solver: a causal
        model's lower triangles when a sample's dense graph passes FLOW_PACKED_BYTES and no sample
        is padded, else dense; a later layer that sees ahead turns the layers kept so far back to
        dense."""
        batch, tokens = a.shape[0], a.shape[-1]
        if self.caps is None:
            big = self.n_layers * tokens * tokens * 8 > FLOW_PACKED_BYTES
            self.packed = big and self.full and not bool(a.triu(1).any())
            shape = (tokens * (tokens + 1) // 2,) if self.packed else (tokens, tokens)
            self.caps = np.empty((batch, self.n_layers, *shape))
        elif self.packed and bool(a.triu(1).any()):  # checked only while packed: dense keeps every entry
            dense = np.zeros((batch, self.n_layers, tokens, tokens))
            dense[:, : self.layer, np.tri(tokens, dtype=bool)] = self.caps[:, : self.layer]
            self.caps, self.packed = dense, False
        x = a.to(torch.float64).cpu().numpy()
        if self.packed:
            from attnflow.explain.flow import pack_lower  # the solver's layout (imported only for flow)

            x = pack_lower(x)
        self.caps[:, self.layer] = x

    def observe_grad(self, layer: int, queries: slice, weights: torch.Tensor, grad: torch.Tensor) -> None:
        """Reduce one block of ∇A (B, H, q, T) over heads as the backward produces it."""
        w, grad = weights.detach().to(self.dtype), grad.to(self.dtype)  # products in dtype: one block
        if self.sink_keys is not None and self.sink_mode != "none":  # the sink-handled A, the model's ∇A
            w = handle_sinks(w, self.sink_keys[:, layer].to(w.device), queries.start, self.sink_mode)
        if not self.full:
            valid = self.valid.to(w.device)
            pair = valid[:, None, queries, None] & valid[:, None, None, :]  # (B, 1, q, T)
            w = w.masked_fill(~pair, 0.0)
            grad = grad.masked_fill(~pair, 0.0)
        batch, _, q, tokens = w.shape
        if "chefer" in self.grad_methods:
            if self.abar is None:
                self.abar = torch.zeros(
                    batch, self.n_layers, tokens, tokens, dtype=self.dtype, device=w.device
                )
            self.abar[:, layer, queries] = (grad * w).clamp_min_(0.0).mean(dim=1)
        if "grad_sam" in self.grad_methods:
            if self.grad_sam is None:
                shape = (batch, self.n_layers, self.rows.shape[1], tokens)
                self.grad_sam = torch.zeros(shape, dtype=self.dtype, device=w.device)
            rows = self.rows.to(w.device)
            inside = (rows >= queries.start) & (rows < queries.start + q)  # (B, R)
            if inside.any():
                at = (rows - queries.start).clamp(0, q - 1)[:, :, None].expand(-1, -1, tokens)  # (B, R, T)
                g = (grad.clamp_min(0.0) * w).mean(dim=1)  # (B, q, T)
                picked = torch.gather(g, 1, at)
                self.grad_sam[:, layer] = torch.where(inside[:, :, None], picked, self.grad_sam[:, layer])


def handle_sinks(w: torch.Tensor, keys: torch.Tensor, start: int, mode: str) -> torch.Tensor:
    """`attnflow.explain.causal.remove_sinks` on one block of query rows start .. start + q - 1.

    w (B, H, q, T), keys (B, H, T) the sink keys of each head. With m_i = sum_{j in S, j != i} w[i, j]:
    "diagonal": w'[i, j] = 0 for j in S \\ {i}, w'[i, i] = w[i, i] + m_i; "drop": the same zeros, the
    row re-normalised (a row with everything on other sinks keeps itself, w'[i, i] = 1). Rows with
    m_i = 0 are left exactly as they are. Returns a new tensor.
    """
    q = w.shape[2]
    k = torch.arange(q, device=w.device)
    i = torch.arange(start, start + q, device=w.device)
    self_attn = w[:, :, k, i]  # (B, H, q): a row's own entry is never sink attention
    weights = keys.to(w.dtype)
    mass = torch.einsum("bhij,bhj->bhi", w, weights) - self_attn * weights[:, :, i]  # (B, H, q) = m_i
    touched = mass > 0
    out = w.masked_fill(keys[:, :, None, :], 0.0)  # every sink column emptied ...
    out[:, :, k, i] = self_attn  # ... except on the diagonal
    if mode == "diagonal":
        out[:, :, k, i] += torch.where(touched, mass, torch.zeros_like(mass))
    elif mode == "drop":
        rest = out.sum(dim=-1)  # (B, H, q)
        scale = torch.where(touched & (rest > 0), 1.0 / rest, torch.ones_like(rest))
        out *= scale[..., None]
        out[:, :, k, i] += (touched & (rest <= 0)).to(out.dtype)
    else:
        raise ValueError(f"sink mode must be 'diagonal' or 'drop', got {mode!r}")
    return out


def tril_matmul(a: torch.Tensor, b: torch.Tensor, block: int = TRIL_BLOCK) -> torch.Tensor:
    """a @ b for lower-triangular a, b (B, T, T), skipping the blocks that are zero.

    Block row I of a b is a[I, :end(I)] @ b[:end(I), :end(I)] (the columns beyond I are 0): about a
    third of the flops of a full product.
    """
    tokens = a.shape[-1]
    if tokens <= block:
        return a @ b
    out = torch.zeros_like(a)
    edges = [*range(0, tokens, block), tokens]
    for i in range(len(edges) - 1):
        rows = slice(edges[i], edges[i + 1])
        # block row I of a, keys 0..end of I, times b's rows 0..end of I: columns beyond I are 0
        out[:, rows, : edges[i + 1]] = a[:, rows, : edges[i + 1]] @ b[:, : edges[i + 1], : edges[i + 1]]
    return out
