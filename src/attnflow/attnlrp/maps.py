"""AttnLRP as a [layer x token] map, the shape every attnflow method returns per input.

Row k (1-based, k = 1..L) is the relevance of each token's hidden state after the relevance of the
explained logit y has been propagated back through the top k layers:

    map[k] = R(h_{L-k}) summed over hidden units, for k < L;   map[L] = R(word embeddings),

the input relevance `lxt` reports (position / token-type embedding relevance left out). Each row
sums to y up to what the softmax rule and biases absorb (`AttnLRPResult`). The map does not depend
on an attention row: it explains the output (the classifier's pooled token, the LM's position).

The relevances are computed by the model's own forward and backward, on its device and in its
dtype, with the attention in torch's fused kernels (``MAP_ATTENTION``: the map needs no R(A), so no
(H, T, T) probabilities are kept and long inputs fit; the values equal the eager attention's to
float rounding, ``tests/unit/attnlrp/test_attnlrp_long.py``); `relevance_map` reads the map off
an `AttnLRPResult` there (a torch tensor, nothing copied
to the host). The functions below hand the study and the API float64 numpy maps, converted last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .api import AttnLRPResult, attnlrp, attnlrp_batch, pools_last_token

__all__ = ["METHOD", "attnlrp_map", "attnlrp_maps", "context_maps", "generation_maps", "relevance_map"]

METHOD = "attnlrp"
# how the maps run the attention (`attnflow.attnlrp.patch.ATTENTION`): fused, forward and backward
MAP_ATTENTION = "sdpa"


def attnlrp_map(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    target: int | None = None,
    position: int = -1,
    token_type_ids: torch.Tensor | None = None,
    epsilon: float = 0.0,
    attention: str = MAP_ATTENTION,
) -> np.ndarray:
    """(L, T) float64 map of one sequence of real tokens (no padding); see the module docstring."""
    res = attnlrp(
        model, input_ids, target=target, position=position, epsilon=epsilon, token_type_ids=token_type_ids,
        attention=attention,
    )  # fmt: skip
    return _as_map(res)


def relevance_map(res: AttnLRPResult) -> torch.Tensor:
    """The (L, T) map of one AttnLRP result on its device and in its dtype:

        map[k] = R(h_{L-k}) for k = 1..L-1,   map[L] = R(word embeddings)

    (rows of ``res.hidden_relevance`` (L + 1, T), h_0 .. h_L, from the top down, the last replaced
    by ``res.input_relevance``). Only rows are picked: the values are the result's own.
    """
    hidden, inputs = res.hidden_relevance.detach(), res.input_relevance.detach()  # (L + 1, T), (T,)
    dtype = torch.promote_types(hidden.dtype, inputs.dtype)
    below_top = hidden[1:-1].flip(0)  # (L - 1, T): R(h_{L-1}) .. R(h_1)
    return torch.cat([below_top.to(dtype), inputs[None].to(dtype)])  # (L, T)


def _as_map(res: AttnLRPResult) -> np.ndarray:
    """`relevance_map` as float64 numpy on the CPU (the maps of the study and the API)."""
    return relevance_map(res).to(torch.float64).cpu().numpy()


def attnlrp_maps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    valid: np.ndarray,
    *,
    targets: Sequence[int | None],
    positions: Sequence[int] | None = None,
    token_type_ids: torch.Tensor | None = None,
    attention: str = MAP_ATTENTION,
) -> list[np.ndarray]:
    """One `attnlrp_map` per sample of a padded batch (B, T): `valid` (B, T) marks real tokens;
    `positions` (absolute, LMs) the explained position of each sample (default: its last token).

    Right padding (each sample's real tokens first) runs the whole batch in one forward and one
    backward (`attnlrp_batch`); any other padding, or a decoder classifier over unequal lengths,
    one sample at a time. Both give each sample the map of its own unpadded sequence."""
    valid = np.asarray(valid, dtype=bool)
    real = [np.flatnonzero(v) for v in valid]
    if positions is None:
        pos = [-1] * len(real)
    else:
        pos = [int(np.searchsorted(r, int(p))) for r, p in zip(real, positions, strict=True)]
    lengths = [len(r) for r in real]
    right_padded = all(np.array_equal(r, np.arange(n)) for r, n in zip(real, lengths, strict=True))
    pools_last = pools_last_token(model) and (len(set(lengths)) > 1 or model.config.pad_token_id is None)
    if right_padded and not (pools_last and len(lengths) > 1):
        mask = torch.as_tensor(valid, device=input_ids.device).long()
        results = attnlrp_batch(model, input_ids, mask, targets=targets, positions=pos,
                                token_type_ids=token_type_ids, lengths=lengths, attention=attention)  # fmt: skip
        return [_as_map(r) for r in results]
    maps = []
    for b in range(input_ids.shape[0]):
        keep = torch.as_tensor(real[b], device=input_ids.device)
        types = None if token_type_ids is None else token_type_ids[b, keep]
        maps.append(
            attnlrp_map(
                model,
                input_ids[b, keep],
                target=targets[b],
                position=pos[b],
                token_type_ids=types,
                attention=attention,
            )
        )
    return maps


def context_maps(ctx: Any, valid: np.ndarray, positions: torch.Tensor | None) -> list[np.ndarray]:
    """AttnLRP maps (L, T_b) per sample of one forward of `attnflow.hf` (`ctx`: its InputContext:
    model, inputs, the bridge's output and target), for the class / token the forward explained."""
    ids = ctx.inputs.get("input_ids") if isinstance(ctx.inputs, Mapping) else None
    if not isinstance(ids, torch.Tensor):
        raise ValueError("attnlrp explains token inputs (input_ids); images are not supported")
    targets = ctx.out.target  # the class / token the gradient pass explained
    if targets is None:
        raise ValueError(
            "attnlrp explains a class or token id: pass target as 'predicted' or ids, not a callable"
        )
    # the attention runs as MAP_ATTENTION says, whatever the model was loaded with
    return attnlrp_maps(
        ctx.model, ids, valid, targets=[int(t) for t in targets],
        positions=None if ctx.out.positions is None else ctx.out.positions.tolist(),
        token_type_ids=ctx.inputs.get("token_type_ids"),
    )  # fmt: skip


def generation_maps(model: Any, run: Any, *, chunk: int = 8) -> np.ndarray:
    """(n, L, T) AttnLRP maps of each generated token's logit (`run`: attnflow.generate's prompt_ids,
    generated_ids and attn), zero beyond the explained row: map[t, k] = relevance after the top
    k + 1 layers, the last row the input's.

    The prefixes prompt + g_0 .. g_{t-1} (a causal row does not see later tokens, so the shorter
    sequence gives the full sequence's row) are right-padded batches of `chunk` tokens' prefixes:
    one forward and one backward per chunk (`attnlrp_batch`).
    """
    from attnflow.devices import model_device

    device = model_device(model)
    seq = run.prompt_ids + run.generated_ids[:-1]
    p, n = len(run.prompt_ids), len(run.generated_ids)
    out = np.zeros((n, run.attn.shape[0], len(seq)))
    for start in range(0, n, chunk):
        steps = range(start, min(start + chunk, n))
        lengths = [p + t for t in steps]
        ids = torch.zeros((len(lengths), max(lengths)), dtype=torch.long, device=device)
        for row, t in enumerate(steps):
            ids[row, : p + t] = torch.tensor(seq[: p + t], device=device)
        mask = torch.arange(max(lengths), device=device)[None] < torch.tensor(lengths, device=device)[:, None]
        results = attnlrp_batch(model, ids, mask.long(), targets=[int(run.generated_ids[t]) for t in steps],
                                lengths=lengths, attention=MAP_ATTENTION)  # fmt: skip
        for t, res in zip(steps, results, strict=True):
            out[t, :, : p + t] = _as_map(res)
    return out
