"""Flow values that tie to within the solver's tolerance, and how a different pushing order orders them.

    python benchmarks/flow_ties.py            # the study's SST-2 flow maps (outputs/, ~1 minute)

Reads the committed SST-2 flow maps of `dvc repro` (outputs/explain/sst2/maps.safetensors) and
recomputes them as the explain stage does (params.yaml's explain settings and the task's rows),
with the solver's plan for long inputs forced onto every length (`_plan.SWEEP_ALIKE_FROM_N = 0`:
every row of the all-heads map solved problem by problem, not swept). Both are exact maxima to
within ~1e-12; they differ in the last bits. Counts, within each (sentence, layer) map, the token
pairs whose values differ by less than TIE (1e-12) without being equal, and how many of those pairs
the recomputation puts in another order, and all pairs whose order changed (an exact tie broken
or made included) -- the order a Spearman rank reads. Writes benchmarks/results/flow_ties.json.
On 2026-11-26 (docs/determinism.md): 14,786 such pairs of 1.87 million, 9,222 of them in another
order, 12,512 pairs in another order in all, values within 2.8e-16; Table 3's flow cells then
moved by up to 5e-3.
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

import numpy as np
import yaml

from attnflow.explain.samples import explain_samples
from attnflow.explanation_file import load_study_maps
from attnflow.io import load_ragged

ROOT = Path(__file__).resolve().parents[1]
TIE = 1e-12
TASK = "sst2"


def near_ties(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int, int]:
    """Over the token pairs i < j of one map row: (pairs, pairs of `a` within TIE but not equal, of
    those the ones `b` orders otherwise, pairs `a` and `b` order differently at all -- an exact tie
    broken or made counts too)."""
    i, j = np.triu_indices(a.size, 1)
    da, db = a[i] - a[j], b[i] - b[j]
    close = (np.abs(da) < TIE) & (da != 0)
    other = np.sign(da) != np.sign(db)
    return i.size, int(close.sum()), int((close & other).sum()), int(other.sum())


def main() -> None:
    cfg = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))  # what dvc repro ran with
    opts = cfg["explain"]
    captured, ids = load_ragged(ROOT / "outputs" / "capture" / TASK / "attentions.safetensors", with_ids=True)
    maps_file = ROOT / "outputs" / "explain" / TASK / "maps.safetensors"
    committed = load_study_maps(maps_file, ids, against="the capture")["flow"]
    plan = importlib.import_module("attnflow.explain._maxflow._plan")
    plan.SWEEP_ALIKE_FROM_N = 0  # the long-input plan at every length
    start = time.perf_counter()
    other = explain_samples(
        captured["attn"], methods=["flow"], residual=opts["residual"], heads=opts["heads"],
        rows=cfg["task"][TASK]["rows"], per_head=False, cls_self=opts["cls_self"],
    )["flow"]  # fmt: skip
    seconds = time.perf_counter() - start
    pairs = close = swapped = reordered = 0
    worst = 0.0
    for a, b in zip(committed, other, strict=True):  # (L, T) each
        worst = max(worst, float(np.max(np.abs(a - b))))
        for row_a, row_b in zip(a, b, strict=True):
            p, c, s, o = near_ties(row_a, row_b)
            pairs, close, swapped, reordered = pairs + p, close + c, swapped + s, reordered + o
    result = {
        "command": "python benchmarks/flow_ties.py",
        "task": TASK,
        "maps": str(maps_file.relative_to(ROOT)),
        "tie": TIE,
        "token_pairs": pairs,
        "near_ties": close,
        "swapped": swapped,
        "reordered": reordered,
        "max_abs_diff": worst,
        "recompute_seconds": round(seconds, 1),
    }
    out = ROOT / "benchmarks" / "results" / "flow_ties.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(
        f"{TASK} flow maps: {pairs:,} token pairs, {close:,} within {TIE:g} without being equal, "
        f"{swapped:,} of them in another order after a recomputation with another plan, {reordered:,} "
        f"pairs in another order in all (values within {worst:.1e}); wrote {out.relative_to(ROOT)}"
    )


if __name__ == "__main__":
    main()
