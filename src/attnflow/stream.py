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

import contextlib
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from attnflow.bridge.eager import attention_configs
from attnflow.bridge.grad import frozen_parameters
from attnflow.explain.torch_ops import normalize_rows
from attnflow.modes import eval_mode, keeps_logits
from attnflow.stream_state import (
    BLOCK_BYTES,
    FLOW_PACKED_BYTES,
    GRAD_STREAM_METHODS,
    STREAM_METHODS,
    TRIL_BLOCK,
    StreamState,
    block_bytes_for,
    handle_sinks,
    tril_matmul,
)

__all__ = [
    "BLOCK_BYTES",
    "FLOW_PACKED_BYTES",
    "GRAD_STREAM_METHODS",
    "STREAM_METHODS",
    "TRIL_BLOCK",
    "StreamState",
    "handle_sinks",
    "stream_gradient_maps",
    "stream_maps",
    "stream_sink_scores",
    "tril_matmul",
]

IMPLEMENTATION = "attnflow_stream"
# Above this many bytes of capacities (L, T, T) per sample, flow is solved on one thread: every
# solver thread holds a workspace of that size (a 30-layer model at 2,048 tokens: 1 GiB each).
FLOW_THREAD_BYTES = 2**29
_local = threading.local()


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
        block = query[:, :, rows]
        if state.grad_methods and state.recompute and torch.is_grad_enabled():
            out, weights = checkpoint(
                eager, module, block, key, value, block_mask, use_reentrant=False, **kwargs
            )
        else:
            out, weights = eager(module, block, key, value, block_mask, **kwargs)  # (B, q, H, D)
        outs.append(out)
        if state.scores is not None:
            state.score(weights, rows)
        if state.methods:
            mixed.append(state.heads(weights, rows))
        if state.grad_methods and weights.requires_grad and state.recompute:
            if state.layer == 0:
                state.first.append((rows, block))
            again = (eager, module, block.detach(), key.detach(), value.detach(), block_mask, kwargs)
            weights.register_hook(_recomputing_hook(state, state.layer, rows, again))
        elif state.grad_methods and weights.requires_grad:
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


def _recomputing_hook(state: StreamState, layer: int, rows: slice, again: tuple):
    """The hook that recomputes one block's probabilities (eager, args..., kwargs) and hands them
    with its ∇A to the stream: nothing of the block but q, k, v is kept until the backward."""

    def hook(grad: torch.Tensor) -> None:
        eager, *args, kwargs = again
        with torch.no_grad():
            _, weights = eager(*args, **kwargs)
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
    block_bytes: int | None = None,
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
    over blocks of query rows); None: `attnflow.stream_state.block_bytes_for` the input's device. sinks: (B, L, H, T) bool sink keys of each head (e.g. from
    `stream_sink_scores` and `attnflow.explain.causal.sinks_from_scores`), handled per head by
    sink_mode ("diagonal" / "drop", as `attnflow.explain.causal.remove_sinks`) before the head mean.
    sink_scores: also return "sink_scores", what `stream_sink_scores` returns, from the same forward
    (of the attention before any sink handling).
    """
    methods = tuple(methods)
    if unknown := sorted(set(methods) - set(STREAM_METHODS)):
        raise ValueError(f"streaming capture computes {', '.join(STREAM_METHODS)}; not {unknown}")
    if not 0.0 <= float(residual) <= 1.0:
        raise ValueError(f"residual must be a number in [0, 1], got {residual!r}")
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
    ids, valid, rows = _checked_batch(batch, rows)
    n_layers = _n_layers(model)
    state = StreamState(
        rows, valid, methods, n_layers, float(residual), dtype, block_bytes=_block_bytes(block_bytes, ids),
        scores=[] if sink_scores else None,
    )  # fmt: skip
    _set_sinks(state, sinks, sink_mode, ids, n_layers)
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


def _set_sinks(state: StreamState, sinks: Any, sink_mode: str, ids: torch.Tensor, n_layers: int) -> None:
    """Hand the stream each head's sink keys (B, L, H, T) to handle by ``sink_mode``."""
    if sink_mode not in ("none", "diagonal", "drop"):
        raise ValueError(f"sink_mode must be 'none', 'diagonal' or 'drop', got {sink_mode!r}")
    if sinks is None or sink_mode == "none":
        return
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


def stream_sink_scores(
    model: Any, batch: Mapping[str, torch.Tensor], *, block_bytes: int | None = None
) -> tuple[np.ndarray, np.ndarray, bool]:
    """`attnflow.explain.causal.sink_scores` of every head, computed while `model` runs on `batch`.

    s[l, h, j] = mean_{i in V(j)} A[l, h, i, j] over the real rows i != j that see key j (i > j
    under a causal mask): the column sums of each block of query rows are added up layer by layer,
    so no (L, H, T, T) attention is held. Returns (scores (B, L, H, T) float64, |V(j)| (B, T),
    causal: every attention entry above the diagonal is 0); `sinks_from_scores` turns them into
    sinks as `find_sinks` does.
    """
    ids, valid, rows = _checked_batch(batch, 0)
    n_layers = _n_layers(model)
    state = StreamState(rows, valid, (), n_layers, block_bytes=_block_bytes(block_bytes, ids), scores=[])
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


def _block_bytes(given: int | None, ids: torch.Tensor) -> int:
    """``given``, or the default for the device the input lies on (`stream_state.block_bytes_for`)."""
    return int(given) if given is not None else block_bytes_for(ids.device)


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
    block_bytes: int | None = None,
    recompute: bool = True,
    sinks: Any = None,
    sink_mode: str = "none",
) -> dict[str, torch.Tensor]:
    """Chefer's generic relevance and Grad-SAM of `rows`, with ∇A reduced over heads in the backward.

    One forward with gradients and one backward of the target's logit (a class; a language
    model's next token at `positions`, default the last real token). A hook on each layer's
    attention probabilities reduces ∇A as the backward produces it:

        chefer:    Ā(l) = mean_h[(∇A(l) ⊙ A(l))⁺],  R(l) = R(l-1) + Ā(l) R(l-1), R(0) = I
                   (Chefer et al. 2021, generic rule; start at layer 1, CLS self-relevance kept)
        grad_sam:  G(l) = mean_h[ReLU(∇A(l)) ⊙ A(l)]   (Barkan et al. 2021)

    so no (B, L, H, T, T) gradient is ever held: the extra memory is Ā's (B, L, T, T) beside what
    autograd itself saves. recompute (default): each block of probabilities is recomputed in the
    backward (activation checkpointing) instead of saved by autograd, so no layer's (B, H, T, T)
    waits for the backward either (the values are the same; one more QKᵀ and softmax per layer).
    sinks, sink_mode: as `stream_maps`; each head's A is sink-handled in the products with the
    model's own ∇A (as the classic path does: `attnflow.explain.causal`). Returns per method
    (B, L, R, T) on the model's device in `dtype`, plus "target" (B,) and "scores" (B,).
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
        rows, valid, (), n_layers, dtype=dtype, block_bytes=_block_bytes(block_bytes, ids), grad_methods=methods,
        recompute=bool(recompute),
    )  # fmt: skip
    _set_sinks(state, sinks, sink_mode, ids, n_layers)
    if positions is None:
        positions = last_positions(valid, ids.shape[0], ids.shape[1], ids.device)
    kwargs, keep = _forward_options(model, positions)
    # recomputing: no parameter gradient is asked for, so parameters are frozen (autograd keeps only
    # what ∂/∂activations needs) and the graph starts at the word embeddings
    frozen = frozen_parameters(model, leaf_embeddings=True) if recompute else contextlib.nullcontext()
    with torch.enable_grad(), frozen, _streaming(model, state):
        out = model(**batch, **kwargs)
    if state.layer != n_layers:
        raise RuntimeError(f"the stream saw {state.layer} attention layers, the config has {n_layers}")
    if not state.first:
        raise ValueError(
            f"{type(model).__name__}'s attention probabilities are not part of the autograd graph"
        )
    scored = positions if keep is None else torch.searchsorted(keep, positions)
    scores, target_ids = target_scores(out, target, scored)
    # the hooks fire on the way down; layer 1's too when recomputing (the backward ends at its queries)
    grads = torch.autograd.grad(scores.sum(), [w for _, w in state.first])
    for (queries, weights), g in zip(state.first, grads, strict=True):
        if not state.recompute:
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
