"""Stage ``explain@TASK``: raw attention, rollout and flow maps of every captured sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import DictConfig
from tqdm.auto import tqdm

from attnflow import tracking
from attnflow.capture import length_batches
from attnflow.explain import EXPLAINERS, head_flow, head_rollout, select_rows
from attnflow.io import load_ragged, save_ragged
from pipelines import _config, _stage

BATCH = 128  # samples of similar length explained together (the flow solver is batched)


def _padded(attn: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(L, H, T_i, T_i) arrays -> (B, L, H, T, T) float64 with rows re-normalised, and lengths."""
    lengths = np.array([a.shape[-1] for a in attn])
    out = np.zeros((len(attn), *attn[0].shape[:2], lengths.max(), lengths.max()))
    for i, a in enumerate(attn):
        a = a.astype(np.float64)  # stored as float16: rows sum to 1 within ~1e-3 only
        out[i, :, :, : a.shape[-1], : a.shape[-1]] = a / a.sum(-1, keepdims=True)
    return out, lengths


def _rows(maps: np.ndarray, pick: str, lengths: np.ndarray) -> np.ndarray:
    """select_rows over (B, L, R, T) maps, or (B, L, H, R, T) per-head maps (heads folded into layers)."""
    lengths = None if pick == "cls" else lengths  # only max / mean need to skip padded query rows
    if maps.ndim == 4:
        return select_rows(maps, pick, lengths=lengths)
    b, n_layers, n_heads, r, t = maps.shape
    return select_rows(maps.reshape(b, n_layers * n_heads, r, t), pick, lengths=lengths).reshape(
        b, n_layers, n_heads, t
    )


def explain_batch(
    attn: np.ndarray, lengths: np.ndarray, opts: DictConfig, rows: str
) -> dict[str, np.ndarray]:
    """Per method the (B, L, T) explanation row at each layer, and (B, L, H, T) per head."""
    sources = [0] if rows == "cls" else None  # CLS only: flow costs grow with the rows asked for
    pick = "cls" if rows == "cls" else rows
    common = dict(residual=opts.residual, lengths=lengths)
    out = {
        m: _rows(EXPLAINERS[m](attn, heads=opts.heads, rows=sources, **common), pick, lengths)
        for m in opts.methods
    }
    if opts.per_head:
        per_head = {
            "raw": lambda: attn[:, :, :, sources] if sources else attn,  # head k's own attention
            "rollout": lambda: head_rollout(attn, heads_below=opts.heads, **common)[
                ..., sources or slice(None), :
            ],
            "flow": lambda: head_flow(attn, heads_below=opts.heads, sources=sources, **common),
        }
        for m in opts.methods:  # (B, L, H, R, T) -> (B, L, H, T)
            out[f"{m}_heads"] = _rows(per_head[m](), pick, lengths)
    return out


def run(cfg: DictConfig, task: str) -> None:
    captured = Path(cfg.paths.outputs) / "capture" / task / "attentions.safetensors"
    out = Path(cfg.paths.outputs) / "explain" / task
    with tracking.stage_run(_config.to_dict(cfg), stage="explain", dataset=task, inputs=[captured]) as mlrun:
        attn = load_ragged(captured)["attn"]
        names = [*cfg.explain.methods, *(f"{m}_heads" for m in cfg.explain.methods if cfg.explain.per_head)]
        maps: dict[str, list] = {name: [None] * len(attn) for name in names}
        for idx in tqdm(length_batches([a.shape[-1] for a in attn], BATCH), desc="explain", leave=False):
            batch, lengths = _padded([attn[i] for i in idx])
            for name, values in explain_batch(batch, lengths, cfg.explain, cfg.explain.rows[task]).items():
                for row, i in enumerate(idx):
                    maps[name][i] = values[row, ..., : lengths[row]]
        save_ragged(out / "maps.safetensors", maps)
        mlrun.log_metrics({"n_samples": len(attn)})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.explain {agreement|sst2}")
