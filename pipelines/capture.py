"""Stage ``capture@TASK``: run the trained model on the study samples; keep attentions and outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from attnflow import tracking
from attnflow.capture import capture
from attnflow.io import atomic_path, save_ragged
from attnflow.models import load_classifier
from pipelines import _config, _stage


def select_samples(frame: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """A seeded random subset of ``n`` rows (all rows if ``n`` >= len), kept in file order."""
    if n >= len(frame):
        return frame.assign(sample_id=np.arange(len(frame)))
    index = np.sort(np.random.default_rng(seed).choice(len(frame), size=n, replace=False))
    return frame.iloc[index].assign(sample_id=index)


def run(cfg: DictConfig, task: str) -> None:
    opts = cfg.capture
    split = Path(cfg.paths.prepared) / task / f"{opts[task].split}.parquet"
    model_dir = Path(cfg.paths.models) / task / "model"
    out = Path(cfg.paths.outputs) / "capture" / task
    with tracking.stage_run(
        _config.to_dict(cfg), stage="capture", dataset=task, inputs=[split, model_dir]
    ) as mlrun:
        model, encoder = load_classifier(model_dir)
        samples = select_samples(pd.read_parquet(split), opts[task].n_samples, cfg.seed).reset_index(
            drop=True
        )
        got = capture(
            model,
            encoder,
            samples["text"].tolist(),
            batch_size=opts.batch_size,
            max_length=min(opts.max_length, encoder.max_length or opts.max_length),  # never past the model's
            dtype=np.dtype(opts.dtype),
        )
        samples = samples.assign(
            tokens=got.tokens,
            input_ids=[ids.tolist() for ids in got.input_ids],
            length=got.lengths,
            pred=got.predictions.astype(np.int8),
            probs=[p.tolist() for p in got.probs],
        )
        with atomic_path(out / "samples.parquet") as tmp:
            samples.to_parquet(tmp, index=False)
        save_ragged(
            out / "attentions.safetensors",
            {"attn": got.attentions},
            metadata={"axes": "layer,head,query,key"},
        )
        labelled = samples["label"] >= 0
        mlrun.log_metrics(
            {
                "n_samples": len(samples),
                "mean_length": float(samples["length"].mean()),
                "accuracy": float((samples["pred"] == samples["label"])[labelled].mean())
                if labelled.any()
                else float("nan"),
            }
        )


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.capture {agreement|sst2}")
