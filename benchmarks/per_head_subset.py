"""The per-head correlations (Appendix A.1) on a seeded subset of the samples against all of them.

    python benchmarks/per_head_subset.py                  # SST-2, every sample's per-head maps (~3 min)
    python benchmarks/per_head_subset.py --maps FILE      # read all samples' <method>_heads from FILE

The explain stage computes the per-head maps of `explain.per_head_samples` samples per task (a
seeded subset, `attnflow.data.subsets.seeded_subset`): on SST-2 (rows: max) they are 12x the flow
problems of the all-heads maps per sample and were ~80% of the stage. This script computes them
for every sample (or reads them from a maps file that has them, e.g. one written before the
subset existed), then for every per-head cell (importance x method x layer x head) compares the
mean over all samples with the subset's mean and its 95% percentile-bootstrap interval (1000
resamples, the study's settings from params.yaml). Writes benchmarks/results/per_head_subset.json
and prints: cells outside the subset's interval, the largest |subset - all|, and the largest
distance from the interval in its half-widths. Sampling alone puts a cell outside with a chance of
about 2.6% at 200 of 872 (the subset is part of the whole: the difference has sd sqrt(1 - n/N)
times the subset mean's).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

from attnflow.data.subsets import seeded_subset
from attnflow.explain.samples import explain_samples
from attnflow.io import load_aligned, load_ragged
from attnflow.metrics.correlation_table import correlation_table
from attnflow.metrics.tables import CorrelationSettings

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "per_head_subset.json"


def head_cells(head_maps, importance, settings: CorrelationSettings, n_boot: int, seed: int) -> dict:
    """{(importance, method, layer, head): row of `correlation_table`} for per-sample (L, H, T) maps."""
    cells = {}
    for name, per_sample in head_maps.items():
        for h in range(per_sample[0].shape[1]):
            rows = correlation_table(
                {name: [a[:, h] for a in per_sample]}, importance, exclude=settings.exclude(list(importance)),
                method=settings.spearman, undefined=settings.undefined, n_boot=n_boot, seed=seed,
            )  # fmt: skip
            for r in rows:
                cells[(r["importance"], name.removesuffix("_heads"), r["layer"], h)] = r
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--maps", type=Path, help="a maps file holding every sample's <method>_heads")
    parser.add_argument("--n", type=int, help="subset size (default: params.yaml's explain.per_head_samples)")
    args = parser.parse_args()
    cfg = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))  # what dvc repro ran with
    opts, corr, seed = cfg["explain"], cfg["correlate"], cfg["seed"]
    n_chosen = args.n or opts["per_head_samples"]
    settings = CorrelationSettings(corr["spearman"], corr["undefined"], dict(corr["include_cls"]))
    importance, ids = load_ragged(
        ROOT / "outputs" / "attribute" / args.task / "importance.safetensors", with_ids=True
    )
    start = time.perf_counter()
    if args.maps:
        every = load_aligned(args.maps, ids, against="the importance file")
        every = {k: v for k, v in every.items() if k.endswith("_heads")}
        source = str(args.maps)
    else:
        captured = load_aligned(
            ROOT / "outputs" / "capture" / args.task / "attentions.safetensors",
            ids,
            against="the importance file",
        )
        every = explain_samples(
            captured["attn"], methods=list(opts["methods"]), residual=opts["residual"], heads=opts["heads"],
            rows=cfg["task"][args.task]["rows"], heads_only=True,
        )  # fmt: skip
        source = "computed from the capture"
    seconds = time.perf_counter() - start
    chosen = seeded_subset(len(ids), n_chosen, seed)
    full = head_cells(every, importance, settings, 0, seed)
    part = head_cells(
        {k: [v[i] for i in chosen] for k, v in every.items()},
        {k: [v[i] for i in chosen] for k, v in importance.items()}, settings, 1000, seed,
    )  # fmt: skip
    outside, worst_diff, worst_z = [], 0.0, 0.0
    for key, r in part.items():
        value, half = full[key]["mean"], (r["ci_high"] - r["ci_low"]) / 2
        worst_diff = max(worst_diff, abs(r["mean"] - value))
        if not r["ci_low"] <= value <= r["ci_high"]:
            outside.append([*key[:2], int(key[2]), int(key[3]), value, r["mean"], r["ci_low"], r["ci_high"]])
            worst_z = max(worst_z, min(abs(value - r["ci_low"]), abs(value - r["ci_high"])) / half)
    result = {
        "task": args.task, "samples": len(ids), "subset": len(chosen), "seed": seed, "cells": len(part),
        "outside_interval": len(outside), "max_abs_diff": worst_diff,
        "max_distance_outside_in_half_widths": worst_z, "maps": source, "maps_seconds": seconds,
        "outside": outside,
    }  # fmt: skip
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(
        f"{args.task}: {len(part)} per-head cells, subset {len(chosen)} of {len(ids)} samples; "
        f"{len(outside)} outside the subset's 95% interval (beyond it by at most {worst_z:.2f} half-widths); "
        f"largest |subset - all| {worst_diff:.4f}. Maps: {source} ({seconds:.0f} s). Wrote {OUT.relative_to(ROOT)}"
    )


if __name__ == "__main__":
    main()
