"""Streaming capture: head-mixed maps computed inside the forward, layer by layer, on the model's device.

`raw`, `rollout` and `flow` need only the head aggregate of each layer, W(l) = mean_h attn[l, h]
(Abnar & Zuidema 2020, Section 2). The classic capture keeps every head of every layer,
(B, L, H, T, T), before any method runs: 69 GB per sample for an 8B model (32 x 32 heads) at 4,096
tokens. Here the model runs with an attention implementation of our own (registered in
transformers' `AttentionInterface`) that calls the model's own eager attention, hands the
probabilities of that one layer to a `StreamState`, and returns no weights, so the (B, H, T, T)
block of a layer is freed before the next layer runs. The state keeps

* raw:      W(l)[rows]                                   (B, L, R, T)
* rollout:  Ã(l)[rows] with Ã(l) = A(l) Ã(l-1), A(l) = (1 - r) W(l) + r I, rows re-normalised;
            one (B, T, T) running product, so memory is O(T²) whatever the depth and head count
* flow:     A(l) in float64 on the CPU, (B, L, T, T): the exact max-flow solver needs the whole
            graph, never the heads. Flow from `rows` at the chosen layers is solved at the end.

Every value is computed with torch on the tensors' own device, in `dtype` (float32 by default,
float64 on request; head means accumulate in `dtype`). In float64 the maps equal
`attnflow.explain`'s on the captured attentions to ~1e-15 (the order of the sums differs only in
the head mean and the row sums); in float32 to ~1e-6.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnflow.bridge.eager import attention_configs
from attnflow.explain.torch_ops import mix_residual, normalize_rows
from attnflow.modes import eval_mode, keeps_logits

__all__ = [
    "GRAD_STREAM_METHODS",
    "STREAM_METHODS",
    "StreamState",
    "handle_sinks",
    "stream_gradient_maps",
    "stream_maps",
    "stream_sink_scores",
]

# The methods a stream can compute: they need the head mean of each layer and nothing else.
STREAM_METHODS = ("raw", "rollout", "flow")
# The gradient methods whose ∇A is reduced over heads as the backward produces each layer.
GRAD_STREAM_METHODS = ("chefer", "grad_sam")
IMPLEMENTATION = "attnflow_stream"
# The model's eager attention runs over blocks of query rows whose probabilities take at most about
# this many bytes, so no (B, H, T, T) block of a long input is ever formed.
BLOCK_BYTES = 16 * 2**20
# Above this many bytes of capacities (L, T, T) per sample, flow is solved on one thread: every
# solver thread holds a workspace of that size (a 30-layer model at 2,048 tokens: 1 GiB each).
FLOW_THREAD_BYTES = 2**29
# Above this many bytes of dense capacities per sample, a causal model's unpadded batch keeps only
# the lower triangles (`attnflow.explain.flow.flow_rows_packed`: one thread, no reversed copy, half
# the memory, 2-9x faster on last-row flow; its values equal the dense solver's to ~1e-14, not to
# the bit, so the short inputs of the study keep the dense path and its numbers). 32 MiB: SmolLM2's
# 30 layers from 375 tokens, GPT-2's 12 from 592.
FLOW_PACKED_BYTES = 2**25
# Causal rollout multiplies lower-triangular matrices in blocks of this many rows.
TRIL_BLOCK = 256
_local = threading.local()


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
    causal: bool = False  # the first layer's A is lower triangular: every layer's is (causal mask)
    grad_methods: tuple[str, ...] = ()  # of GRAD_STREAM_METHODS: hooks reduce each layer's ∇A over heads
    abar: torch.Tensor | None = None  # chefer: Ā(l) = mean_h[(∇A ⊙ A)⁺], (B, L, T, T)
    grad_sam: torch.Tensor | None = None  # grad_sam: G(l)[rows] = mean_h[ReLU(∇A) ⊙ A][rows], (B, L, R, T)
    first: list = field(default_factory=list)  # layer 1's (rows, weights) blocks: the backward's inputs
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


def _stream_attention(
    module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask=None, **kwargs
):
    """The model's own eager attention, over blocks of query rows; the head mean of its
    probabilities goes to the active stream, and no weights to the model's output."""
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise RuntimeError(
            f"{type(module).__name__} has no eager_attention_forward in {type(module).__module__}: "
            "streaming capture needs transformers' attention interface"
        )
    state = getattr(_local, "state", None)
    if state is None:  # not inside stream_maps: plain eager
        return eager(module, query, key, value, mask, **kwargs)
    batch, heads, tokens, keys = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
    # query rows per block: the (B, H, q, T) probabilities and their pre-softmax scores in one block
    step = max(1, state.block_bytes // (3 * batch * heads * keys * query.element_size()))
    outs, mixed = [], []
    for start in range(0, tokens, step):
        rows = slice(start, min(start + step, tokens))
        block_mask = None if mask is None else mask[..., rows, :]
        out, weights = eager(module, query[:, :, rows], key, value, block_mask, **kwargs)  # (B, q, H, D)
        outs.append(out)
        if state.scores is not None:
            state.score(weights, rows)
        if state.methods:
            mixed.append(state.heads(weights, rows))
        if state.grad_methods and weights.requires_grad:
            layer = state.layer
            if layer == 0:
                state.first.append((rows, weights))
            else:
                weights.register_hook(_grad_hook(state, layer, rows, weights.detach()))
        del weights
    if state.methods:
        state.observe(mixed[0] if len(mixed) == 1 else torch.cat(mixed, dim=1))
    elif state.layer >= state.n_layers:
        raise RuntimeError(f"the model ran more attention layers than its config's {state.n_layers}")
    else:
        state.layer += 1
    return (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)), None


def _grad_hook(state: StreamState, layer: int, rows: slice, weights: torch.Tensor):
    """The hook that hands one block's ∇A to the stream as the backward produces it."""

    def hook(grad: torch.Tensor) -> None:
        state.observe_grad(layer, rows, weights, grad)

    return hook


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if IMPLEMENTATION not in AttentionInterface._global_mapping:
        AttentionInterface.register(IMPLEMENTATION, _stream_attention)
        AttentionMaskInterface.register(IMPLEMENTATION, ALL_MASK_ATTENTION_FUNCTIONS["eager"])


@contextmanager
def _streaming(model: Any, state: StreamState) -> Iterator[None]:
    """Run `model` in eval mode (as the capturing paths do: no dropout) with the streaming attention
    for the duration; restore every config and training flag after."""
    _register()
    configs = attention_configs(model)
    saved = [(config, config._attn_implementation) for config in configs]
    _local.state = state
    try:
        for config, _ in saved:
            config._attn_implementation_internal = IMPLEMENTATION
        with eval_mode(model):
            yield
    finally:
        _local.state = None
        for config, impl in saved:
            config._attn_implementation_internal = impl


def _n_layers(model: Any) -> int:
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(text, "num_hidden_layers", None) or getattr(text, "n_layer", None)
    if not n:
        raise ValueError(f"{type(model).__name__}'s config names no num_hidden_layers")
    return int(n)


def stream_maps(
    model: Any,
    batch: Mapping[str, torch.Tensor],
    rows: torch.Tensor | Sequence[int] | int,
    methods: Sequence[str] = STREAM_METHODS,
    *,
    residual: float = 0.5,
    dtype: torch.dtype = torch.float32,
    flow_layers: Sequence[int] | None = None,
    normalize_flow: bool = True,
    block_bytes: int = BLOCK_BYTES,
    logits_at: torch.Tensor | None = None,
    sinks: Any = None,
    sink_mode: str = "none",
    sink_scores: bool = False,
) -> dict[str, Any]:
    """Raw attention, rollout and flow of `rows`, computed while `model` runs on `batch`.

    rows: (B, R) query positions per sample, one list for every sample, or an int. Returns, per
    method, (B, L, R, T) on the model's device in `dtype` (flow: (B, len(flow_layers), R, T),
    normalised per row as `attention_flow` does; layers 0-based, None = all). Padded positions
    are 0. "logits": a classifier's (B, C); a language model's at the rows only, (B, R, V), or
    at `logits_at` (B,) positions, (B, V) (its (B, T, V) logits are never formed). block_bytes:
    the largest block of attention probabilities formed at once (the model's eager attention runs
    over blocks of query rows). sinks: (B, L, H, T) bool sink keys of each head (e.g. from
    `stream_sink_scores` and `attnflow.explain.causal.sinks_from_scores`), handled per head by
    sink_mode ("diagonal" / "drop", as `attnflow.explain.causal.remove_sinks`) before the head mean.
    sink_scores: also return "sink_scores", what `stream_sink_scores` returns, from the same forward
    (of the attention before any sink handling).
    """
    methods = tuple(methods)
    if unknown := sorted(set(methods) - set(STREAM_METHODS)):
        raise ValueError(f"streaming capture computes {', '.join(STREAM_METHODS)}; not {unknown}")
    if sink_mode not in ("none", "diagonal", "drop"):
        raise ValueError(f"sink_mode must be 'none', 'diagonal' or 'drop', got {sink_mode!r}")
    if not 0.0 <= float(residual) <= 1.0:
        raise ValueError(f"residual must be a number in [0, 1], got {residual!r}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    ids, valid, rows = _checked_batch(batch, rows)
    n_layers = _n_layers(model)
    state = StreamState(
        rows, valid, methods, n_layers, float(residual), dtype, block_bytes=int(block_bytes),
        scores=[] if sink_scores else None,
    )  # fmt: skip
    if sinks is not None and sink_mode != "none":
        keys = torch.as_tensor(np.asarray(sinks, dtype=bool) if not torch.is_tensor(sinks) else sinks)
        if (
            keys.ndim != 4
            or keys.shape[0] != ids.shape[0]
            or keys.shape[1] != n_layers
            or keys.shape[-1] != ids.shape[1]
        ):
            raise ValueError(
                f"sinks must be a (batch, layer, head, key) bool mask of shape ({ids.shape[0]}, {n_layers}, heads, "
                f"{ids.shape[1]}), got {tuple(keys.shape)}"
            )
        state.sink_keys, state.sink_mode = keys.to(device=ids.device, dtype=torch.bool), sink_mode
    at = (
        rows if logits_at is None else torch.as_tensor(logits_at, device=ids.device).reshape(-1, 1)
    )  # (B, R')
    kwargs, keep = _forward_options(model, at)
    with torch.no_grad(), _streaming(model, state):
        out = model(**batch, **kwargs)
    if state.layer != n_layers:
        raise RuntimeError(f"the stream saw {state.layer} attention layers, the config has {n_layers}")
    logits = getattr(out, "logits", None)
    if logits is not None and logits.ndim == 3:  # a language model: (B, K or T, V) -> (B, R', V) at `at`
        where = (at if keep is None else torch.searchsorted(keep, at)).to(logits.device)
        logits = logits.gather(1, where[:, :, None].expand(-1, -1, logits.shape[-1]))
        if logits_at is not None:
            logits = logits[:, 0]  # (B, V)
    result: dict[str, torch.Tensor] = {"logits": logits}
    if "raw" in methods:
        result["raw"] = torch.stack(state.raw, dim=1)
    if "rollout" in methods:
        result["rollout"] = torch.stack(state.rollout, dim=1)
    if "flow" in methods:
        result["flow"] = _flow(state, flow_layers, normalize_flow).to(device=ids.device, dtype=dtype)
    if sink_scores:
        result["sink_scores"] = _sink_scores(state)
    return result


def stream_sink_scores(
    model: Any, batch: Mapping[str, torch.Tensor], *, block_bytes: int = BLOCK_BYTES
) -> tuple[np.ndarray, np.ndarray, bool]:
    """`attnflow.explain.causal.sink_scores` of every head, computed while `model` runs on `batch`.

    s[l, h, j] = mean_{i in V(j)} A[l, h, i, j] over the real rows i != j that see key j (i > j
    under a causal mask): the column sums of each block of query rows are added up layer by layer,
    so no (L, H, T, T) attention is held. Returns (scores (B, L, H, T) float64, |V(j)| (B, T),
    causal: every attention entry above the diagonal is 0); `sinks_from_scores` turns them into
    sinks as `find_sinks` does.
    """
    _, valid, rows = _checked_batch(batch, 0)
    n_layers = _n_layers(model)
    state = StreamState(rows, valid, (), n_layers, block_bytes=int(block_bytes), scores=[])
    kwargs, _ = _forward_options(model, rows[:, 0])
    with torch.no_grad(), _streaming(model, state):
        model(**batch, **kwargs)
    if state.layer != n_layers:
        raise RuntimeError(f"the stream saw {state.layer} attention layers, the config has {n_layers}")
    return _sink_scores(state)


def _sink_scores(state: StreamState) -> tuple[np.ndarray, np.ndarray, bool]:
    """(scores (B, L, H, T), |V(j)| (B, T), causal) from the column sums the stream added up."""
    total = torch.stack(state.scores, dim=1).cpu().numpy()  # (B, L, H, T)
    real = state.valid.cpu().numpy()
    if state.upper_zero:  # V(j) = the real rows after j
        seen = real[:, ::-1].cumsum(axis=1)[:, ::-1] - real
    else:  # every other real row
        seen = real.sum(axis=1, keepdims=True) - real
    seen = np.where(real, seen, 0)
    scores = np.divide(
        total, seen[:, None, None, :], out=np.zeros_like(total), where=seen[:, None, None, :] > 0
    )
    return scores, seen, bool(state.upper_zero)


def _forward_options(model: Any, positions: torch.Tensor) -> tuple[dict[str, Any], torch.Tensor | None]:
    """(keyword arguments of the streamed forward, the sorted positions whose logits it forms or
    None): no key / value cache (it would grow with depth), and a language model's logits at
    `positions` only, never (B, T, V)."""
    kwargs: dict[str, Any] = {}
    if getattr(model.config, "use_cache", None) is not None:
        kwargs["use_cache"] = False
    keep = None
    if keeps_logits(model):
        keep = torch.unique(positions)
        kwargs["logits_to_keep"] = keep
    return kwargs, keep


def _checked_batch(
    batch: Mapping[str, torch.Tensor], rows: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, valid (B, T) bool, rows (B, R) long), checked."""
    ids = batch["input_ids"]
    b, t = ids.shape
    mask = batch.get("attention_mask")
    valid = torch.ones(b, t, dtype=torch.bool, device=ids.device) if mask is None else mask.bool()
    rows = torch.as_tensor(rows, dtype=torch.long, device=ids.device)
    rows = rows.reshape(1, -1).expand(b, -1) if rows.ndim < 2 else rows
    if rows.shape[0] != b or ((rows < 0) | (rows >= t)).any():
        raise ValueError(f"rows must be (batch={b}, R) positions in [0, {t}), got shape {tuple(rows.shape)}")
    if not valid.gather(1, rows.to(valid.device)).all():
        raise ValueError("rows must be real tokens, not padding")
    return ids, valid, rows


def stream_gradient_maps(
    model: Any,
    batch: Mapping[str, torch.Tensor],
    rows: torch.Tensor | Sequence[int] | int,
    methods: Sequence[str] = GRAD_STREAM_METHODS,
    *,
    target: Any = "predicted",
    positions: torch.Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    block_bytes: int = BLOCK_BYTES,
) -> dict[str, torch.Tensor]:
    """Chefer's generic relevance and Grad-SAM of `rows`, with ∇A reduced over heads in the backward.

    One forward with gradients and one backward of the target's logit (a class; a language
    model's next token at `positions`, default the last real token). A hook on each layer's
    attention probabilities reduces ∇A as the backward produces it:

        chefer:    Ā(l) = mean_h[(∇A(l) ⊙ A(l))⁺],  R(l) = R(l-1) + Ā(l) R(l-1), R(0) = I
                   (Chefer et al. 2021, generic rule; start at layer 1, CLS self-relevance kept)
        grad_sam:  G(l) = mean_h[ReLU(∇A(l)) ⊙ A(l)]   (Barkan et al. 2021)

    so no (B, L, H, T, T) gradient is ever held: the extra memory is Ā's (B, L, T, T) beside what
    autograd itself saves. Returns per method (B, L, R, T) on the model's device in `dtype`, plus
    "target" (B,) and "scores" (B,).
    """
    from attnflow.bridge.hf import last_positions, target_scores

    methods = tuple(methods)
    if unknown := sorted(set(methods) - set(GRAD_STREAM_METHODS)):
        raise ValueError(f"streaming gradients compute {', '.join(GRAD_STREAM_METHODS)}; not {unknown}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    ids, valid, rows = _checked_batch(batch, rows)
    n_layers = _n_layers(model)
    state = StreamState(
        rows, valid, (), n_layers, dtype=dtype, block_bytes=int(block_bytes), grad_methods=methods
    )
    if positions is None:
        positions = last_positions(valid, ids.shape[0], ids.shape[1], ids.device)
    kwargs, keep = _forward_options(model, positions)
    with torch.enable_grad(), _streaming(model, state):
        out = model(**batch, **kwargs)
    if state.layer != n_layers:
        raise RuntimeError(f"the stream saw {state.layer} attention layers, the config has {n_layers}")
    if not state.first:
        raise ValueError(
            f"{type(model).__name__}'s attention probabilities are not part of the autograd graph"
        )
    scored = positions if keep is None else torch.searchsorted(keep, positions)
    scores, target_ids = target_scores(out, target, scored)
    grads = torch.autograd.grad(scores.sum(), [w for _, w in state.first])  # the hooks fire on the way down
    for (queries, weights), g in zip(state.first, grads, strict=True):
        state.observe_grad(0, queries, weights, g)
    state.first.clear()
    result: dict[str, torch.Tensor] = {"scores": scores.detach(), "target": target_ids}
    if "grad_sam" in methods:
        result["grad_sam"] = state.grad_sam
    if "chefer" in methods:
        result["chefer"] = chefer_rows(state.abar, rows)
    return result


def chefer_rows(abar: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Rows of R(l) = (I + Ā(l)) R(l-1), R(0) = I, at every layer, by vector products from the left.

    R(l)[r] = e_r (I + Ā(l)) (I + Ā(l-1)) ... (I + Ā(1)): L(L+1)/2 products of (R, T) by (T, T)
    instead of L full (T, T) products. abar (B, L, T, T), rows (B, R) -> (B, L, R, T).
    """
    batch, n_layers, tokens, _ = abar.shape
    start = torch.zeros(batch, rows.shape[1], tokens, dtype=abar.dtype, device=abar.device)
    start.scatter_(2, rows.to(abar.device)[:, :, None], 1.0)  # e_r (B, R, T)
    out = torch.empty(batch, n_layers, rows.shape[1], tokens, dtype=abar.dtype, device=abar.device)
    for layer in range(n_layers):
        v = start
        for k in range(layer, -1, -1):
            v = v + v @ abar[:, k]
        out[:, layer] = v
    return out


def _flow(state: StreamState, layers: Sequence[int] | None, normalize: bool) -> torch.Tensor:
    """Exact max flow from `rows` at `layers` over the streamed capacities (CPU solver)."""
    from attnflow.explain.flow import flow_rows, flow_rows_packed

    caps, valid = state.caps, state.valid.cpu().numpy()
    n_layers, tokens = caps.shape[1], valid.shape[1]
    layer_idx = np.arange(n_layers) if layers is None else np.asarray(layers, dtype=np.int64).reshape(-1)
    if layer_idx.size == 0 or (layer_idx < 0).any() or (layer_idx >= n_layers).any():
        raise ValueError(f"flow_layers must be 0-based layers in [0, {n_layers}), got {layers!r}")
    rows = state.rows.cpu().numpy()  # (B, R)
    n_src = rows.shape[1]
    # every sample's rows differ: solve sample by sample, rows ordered (layer, source)
    out = np.zeros((caps.shape[0], layer_idx.size * n_src, tokens))
    row_layer = np.repeat(layer_idx, n_src)
    for b in range(caps.shape[0]):
        src = np.tile(rows[b], layer_idx.size)
        if state.packed:  # a large causal graph: its lower triangles, read in place, one thread
            out[b] = flow_rows_packed(caps[b], tokens, row_layer, src)
            continue
        supply = caps[b : b + 1, row_layer, src, :]  # (1, R', T)
        one = caps[b : b + 1]
        threads = 1 if one.nbytes > FLOW_THREAD_BYTES else None  # each solver thread holds a copy's worth
        out[b] = flow_rows(one, valid[b : b + 1], row_layer, supply, valid[b : b + 1, src], threads=threads)[
            0
        ]
    out = torch.from_numpy(out.reshape(caps.shape[0], layer_idx.size, n_src, tokens))
    return normalize_rows(out, inplace=True) if normalize else out
