"""The explain@sst2 stage's library calls (pipelines/explain.py `explain_batch`, default config), for any
implementation of the explain functions: a git commit's (benchmarks/_gitref.py) or today's attnflow.explain.

Default config (conf/explain/default.yaml): methods raw, rollout, flow; heads mean; residual 0.5;
rows "max" for SST-2 (so every query row of every layer, rows=None); per_head true. Samples are
grouped by length into batches of BATCH, padded, cast to float64 with rows re-normalised, as the
stage does (`_padded`).
"""

from __future__ import annotations

import numpy as np

BATCH = 128  # pipelines/explain.py
RESIDUAL = 0.5
HEADS = "mean"
PICK = "max"


def length_batches(lengths, batch_size: int = BATCH) -> list[np.ndarray]:
    """attnflow.capture.length_batches (copied: importing capture pulls in torch)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def padded(attn: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """pipelines/explain.py `_padded`: (B, L, H, T, T) float64, rows re-normalised, and lengths."""
    lengths = np.array([a.shape[-1] for a in attn])
    out = np.zeros((len(attn), *attn[0].shape[:2], lengths.max(), lengths.max()))
    for i, a in enumerate(attn):
        a = a.astype(np.float64)
        out[i, :, :, : a.shape[-1], : a.shape[-1]] = a / a.sum(-1, keepdims=True)
    return out, lengths


def explain_batch(lib, attn: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
    """The stage's calls for rows="max": per method (B, L, T), per head (B, L, H, T)."""
    common = dict(residual=RESIDUAL, lengths=lengths)

    def rows(maps):
        if maps.ndim == 4:
            return lib.select_rows(maps, PICK, lengths=lengths)
        b, n_layers, n_heads, r, t = maps.shape
        folded = maps.reshape(b, n_layers * n_heads, r, t)
        return lib.select_rows(folded, PICK, lengths=lengths).reshape(b, n_layers, n_heads, t)

    return {
        "raw": rows(lib.raw_attention(attn, heads=HEADS, lengths=lengths)),
        "rollout": rows(lib.attention_rollout(attn, heads=HEADS, **common)),
        "flow": rows(lib.attention_flow(attn, heads=HEADS, sources=None, **common)),
        "raw_heads": rows(attn),
        "rollout_heads": rows(lib.head_rollout(attn, heads_below=HEADS, **common)),
        "flow_heads": rows(lib.head_flow(attn, heads_below=HEADS, sources=None, **common)),
    }


def run(
    lib, attn: list[np.ndarray], batches: list[np.ndarray], timings: dict | None = None
) -> dict[str, list]:
    """Every batch through `explain_batch`; per method a list of per-sample arrays (unpadded)."""
    import time

    maps: dict[str, list] = {}
    for idx in batches:
        batch, lengths = padded([attn[i] for i in idx])
        t0 = time.perf_counter()
        values = explain_batch(lib, batch, lengths)
        if timings is not None:
            timings[len(timings)] = (int(lengths.max()), len(idx), time.perf_counter() - t0)
        for name, v in values.items():
            lst = maps.setdefault(name, [None] * len(attn))
            for row, i in enumerate(idx):
                lst[i] = v[row, ..., : lengths[row]]
    return maps
