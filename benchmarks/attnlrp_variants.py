"""AttnLRP on the study's SST-2 model: which relevance ranks tokens most faithfully, at what cost.

On the faithfulness stage's subset (same seed, same perturbation protocol), AOPC
comprehensiveness / sufficiency of AttnLRP variants beside one gradient (input x gradient):

    input        R(word embeddings), as lxt reports (the faithfulness table's attnlrp row)
    embedding    R(h_0): word + position + token-type embedding relevance
    epsilon      input relevance with the epsilon rule's eps = 1e-6 on every linear layer
    abs          |input relevance| (evidence for or against ranked alike)

    python benchmarks/attnlrp_variants.py [--n 40]     # needs dvc repro's models/sst2 and capture
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()
    from attnflow.attnlrp import attnlrp
    from attnflow.attribution.comparators import comparator_scores
    from attnflow.attribution.faithfulness import faithfulness_samples
    from attnflow.data.subsets import seeded_subset
    from attnflow.hf import eager_attention
    from attnflow.io import read_parquet
    from attnflow.models import load_classifier
    from attnflow.tasks import get_task
    from pipelines import _config, _stage

    cfg = _config.load()
    paths = _stage.paths(cfg)
    samples = read_parquet(paths.samples("sst2"))
    chosen = seeded_subset(len(samples), args.n, cfg.seed)
    ids = [np.asarray(samples["input_ids"].iloc[i]) for i in chosen]
    model, encoder = load_classifier(paths.model("sst2"))
    model.eval()
    hf = model.hf
    variants: dict[str, list[np.ndarray]] = {}
    seconds: dict[str, float] = {}
    for name, eps, use in (("input", 0.0, "input"), ("embedding", 0.0, "h0"), ("epsilon", 1e-6, "input")):
        start, out = time.perf_counter(), []
        with eager_attention(hf):
            for row in ids:
                res = attnlrp(hf, torch.as_tensor(row), epsilon=eps)
                r = res.input_relevance if use == "input" else res.hidden_relevance[0]
                out.append(r.detach().double().numpy())
        seconds[name] = (time.perf_counter() - start) / len(ids)
        variants[name] = out
    variants["abs"] = [np.abs(v) for v in variants["input"]]
    grads, grad_seconds, _ = comparator_scores(model, ids, pad_id=encoder.pad_id, names=["input_x_gradient"])
    variants["input_x_gradient"] = grads["input_x_gradient"]
    seconds["input_x_gradient"] = grad_seconds["input_x_gradient"]
    rankings = {(k, None): v for k, v in variants.items()}
    scores, _ = faithfulness_samples(model, [r.tolist() for r in ids], rankings, sample_ids=list(chosen),
                                     random_seed=cfg.seed, pad_id=encoder.pad_id,
                                     keep_positions=get_task("sst2").special_positions)  # fmt: skip
    table = scores.groupby(["method", "metric"])["value"].mean().unstack()
    out = {
        m: {"comprehensiveness": round(float(table.at[m, "comprehensiveness"]), 3),
            "sufficiency": round(float(table.at[m, "sufficiency"]), 3),
            "vs_gradient": round(seconds[m] / seconds["input_x_gradient"], 2) if m in seconds else None}
        for m in table.index
    }  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
