"""Would the sensitivity table's blank-out switches survive a subset of the samples?

    python benchmarks/switch_subset.py              # SST-2, n = 200 (seconds: no model call)
    python benchmarks/switch_subset.py --n 100 300  # other subset sizes

The attribute stage recomputes blank-out under two of its switches (`attribution.blank_token`,
`attribution.mask_blank`; the third follows from the configured run), two of its three passes of
872 sentences through MiniLM on SST-2. The report shows, per cell, Δ = the cell under the switch
minus the configured cell. This reads the committed outputs (every sample's switched blank-out in
`switches.safetensors`, the maps, the importance) and, for a seeded subset of n samples, computes
each cell's Δ on the subset (switched and configured on the same samples: a paired difference)
with its 95% percentile-bootstrap interval (1000 resamples of the subset's samples), and counts the
cells where the Δ of all samples lies outside that interval. It is the evidence for the subset the
attribute stage now takes (`attribution.switch_samples` = 300, Δ against the configured cells of the
same samples, variant `configured@switch_samples`): run it on outputs of `attribution.switch_samples=null`
(every sample's switched blank-out). Writes benchmarks/results/switch_subset.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml

from attnflow.data.subsets import seeded_split
from attnflow.explanation_file import load_study_maps
from attnflow.io import load_aligned, load_ragged
from attnflow.metrics.correlate_samples import correlate_samples

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "switch_subset.json"
SWITCHES = ("blank_token=pad", "mask_blank=true")  # the switches that need a model pass
N_BOOT = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--n", type=int, nargs="+", default=[200])
    args = parser.parse_args()
    cfg = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    corr, seed, methods = cfg["correlate"], cfg["seed"], cfg["explain"]["methods"]
    exclude = () if corr["include_cls"].get("blank_out", True) else (0,)
    base = ROOT / "outputs"
    importance, ids = load_ragged(base / "attribute" / args.task / "importance.safetensors", with_ids=True)
    against = "the importance file"
    path = base / "attribute" / args.task / "switches.safetensors"
    if len(load_ragged(path, with_ids=True)[1]) != len(ids):
        raise SystemExit(
            f"{path} holds the switches of a subset (attribution.switch_samples): this needs every "
            "sample's, from `dvc exp run -S attribution.switch_samples=null`"
        )
    switched = load_aligned(path, ids, against=against)
    maps = load_study_maps(base / "explain" / args.task / "maps.safetensors", ids, against=against)
    options = dict(exclude=exclude, method=corr["spearman"], undefined=corr["undefined"])
    configured = {
        m: correlate_samples(maps[m], importance["blank_out"], **options)["values"] for m in methods
    }
    deltas = {  # (switch, method) -> per-sample (N, L) differences
        (s, m): correlate_samples(maps[m], switched[s], **options)["values"] - configured[m]
        for s in SWITCHES
        for m in methods
    }
    results = []
    for n in args.n:
        chosen, _ = seeded_split(len(ids), min(n, len(ids)), np.random.default_rng(seed))
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, len(chosen), size=(N_BOOT, len(chosen)))
        outside, cells, worst, largest = [], 0, 0.0, 0.0
        for (switch, method), d in deltas.items():
            full, part = d.mean(axis=0), d[chosen]  # (L,), (n, L)
            boot = part[draws].mean(axis=1)  # (N_BOOT, L)
            low, high = np.percentile(boot, [2.5, 97.5], axis=0)
            for layer in range(d.shape[1]):
                cells += 1
                largest = max(largest, abs(part[:, layer].mean() - full[layer]))
                if not low[layer] <= full[layer] <= high[layer]:
                    half = (high[layer] - low[layer]) / 2
                    beyond = min(abs(full[layer] - low[layer]), abs(full[layer] - high[layer]))
                    worst = max(worst, beyond / half if half > 0 else np.inf)
                    outside.append(
                        [switch, method, layer + 1, float(full[layer]), float(part[:, layer].mean())]
                    )
        results.append({
            "n": n, "cells": cells, "outside_interval": len(outside),
            "max_distance_outside_in_half_widths": worst, "max_abs_diff": largest, "outside": outside,
        })  # fmt: skip
        print(
            f"{args.task}, subset {n} of {len(ids)}: {cells} Δ cells ({', '.join(SWITCHES)} x {len(methods)} "
            f"methods x layers); {len(outside)} outside the subset's 95% interval (beyond it by at most "
            f"{worst:.2f} half-widths); largest |Δ subset - Δ all| {largest:.4f}"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"task": args.task, "samples": len(ids), "runs": results}, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
