"""The attention-gradient maps of a generation (Chefer's generic rule, Grad-SAM, ...) per generated
token (AttnLRP's: attnflow.attnlrp.maps.generation_maps).

Both explain token g_t by its logit at row P + t - 1 of the teacher-forced sequence
prompt + g_0 .. g_{n-2} (see attnflow.generate.explanation), and return (n, L, T) maps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attnflow.explain import normalize_receptive_field
from attnflow.explain.apply import CausalSpec, RowSpec, apply

__all__ = ["gradient_maps"]


def gradient_maps(
    model: Any,
    run: Any,
    methods: Sequence[str],
    modes: Sequence[str],
    sink_mask: np.ndarray,
    grad_batch_size: int,
    fields: Sequence[str] = ("none",),
) -> dict[str, dict[tuple[str, str], np.ndarray]]:
    """{method: {(sink mode, receptive field): (n, L, T)}} for the attention methods that need the
    attention gradient (Chefer's generic rule, Grad-SAM, ...: their records' ``needs``), row
    P + t - 1 per generated token.

    The target of token t is its logit at row P + t - 1. grad_batch_size tokens per forward and
    backward: a batch of copies of the sequence, copy b scoring its own token, so the summed
    scores give each copy its own gradient (samples do not interact). With a sink mode the method
    runs on the sink-handled attention (the gradient stays that of the model's attention):
    A' = remove_sinks(A). A method whose record has an identity term (Chefer: R = I + ...) is
    shown as R - I, the explained token's self-relevance before any attention left out; maps are
    clipped at 0. Receptive field "column": that map for every row (R - I, clipped), each key's
    column divided by its mean over the rows that see it (`normalize_receptive_field`), then the
    row; the identity is left out first, so a key's own self-relevance does not set its scale.
    "uniform" has no baseline for these methods (their needs exist only for the attention the
    model computed; see `attnflow.explain.kit`): their maps are the plain ones, as with "none".
    """
    import torch

    from attnflow.bridge import forward
    from attnflow.devices import model_device
    from attnflow.methods import METHODS

    records = [METHODS[m] for m in methods]
    device = model_device(model)
    p, n = len(run.prompt_ids), len(run.generated_ids)
    seq = torch.tensor([run.prompt_ids + run.generated_ids[:-1]], device=device)  # (1, T)
    rows = torch.arange(p - 1, p - 1 + n, device=device)
    targets = torch.tensor(run.generated_ids, device=device)
    shape = (n, run.attn.shape[0], run.attn.shape[-1])  # (n, L, T)
    maps = {m: {(mode, f): np.zeros(shape) for mode in modes for f in fields} for m in methods}
    every_row = RowSpec(tuple(range(shape[-1])))
    for start in range(0, n, grad_batch_size):
        stop = min(start + grad_batch_size, n)
        r, g = rows[start:stop], targets[start:stop]
        c = stop - start
        batch = {"input_ids": seq.expand(c, -1), "attention_mask": torch.ones(c, seq.shape[1], device=device)}
        score = lambda z, r=r, g=g, c=c: z[torch.arange(c), r, g]  # noqa: E731  (logit of g_t at row r_t)
        fo = forward(model, batch, ("attentions", "attn_grad"), target=score)
        a = fo.attentions.to(device="cpu", dtype=torch.float64).numpy()  # (c, L, H, T, T)
        grad = fo.need("attn_grad").to(device="cpu", dtype=torch.float64).numpy()
        for b in range(c):
            row = int(r[b])
            for mode in modes:  # the causal option of every method: sinks (A' = remove_sinks(A))
                causal = CausalSpec(sinks=mode, sink_positions=sink_mask)
                (got,) = apply(records, a[b][None], {"attn_grad": grad[b][None]}, RowSpec(row), causal)
                for m in methods:
                    rel = np.array(got[m])  # (L, T)
                    if METHODS[m].identity:
                        rel[:, row] -= 1.0  # R - I: the identity's self-relevance left out
                    for f in fields:
                        if f != "column":
                            maps[m][(mode, f)][start + b] = np.clip(rel, 0.0, None)
                if "column" in fields:
                    (full,) = apply(records, a[b][None], {"attn_grad": grad[b][None]}, every_row, causal)
                    for m in methods:
                        rel = np.array(full[m])  # (L, T, T) [layer, query, key]
                        if METHODS[m].identity:
                            rel -= np.eye(rel.shape[-1])
                        rel = normalize_receptive_field(np.clip(rel, 0.0, None), mode="column", causal=True)
                        maps[m][(mode, "column")][start + b] = rel[:, row]
    return maps
