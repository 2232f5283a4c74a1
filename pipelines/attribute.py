"""Stage ``attribute@TASK``: blank-out and input-gradient importance of every token."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

from attnflow import tracking
from attnflow.attribution import blank_out, input_gradients
from attnflow.capture import length_batches, pad_batch
from attnflow.io import save_ragged
from attnflow.models import load_classifier
from pipelines import _config, _stage


def _class(value: str) -> str | int:
    return int(value) if str(value).isdigit() else str(value)


def run(cfg: DictConfig, task: str) -> None:
    opts = cfg.attribution
    captured = Path(cfg.paths.outputs) / "capture" / task
    model_dir = Path(cfg.paths.models) / task / "model"
    out = Path(cfg.paths.outputs) / "attribute" / task
    with tracking.stage_run(
        _config.to_dict(cfg),
        stage="attribute",
        dataset=task,
        inputs=[captured / "samples.parquet", model_dir],
    ) as mlrun:
        model, encoder = load_classifier(model_dir)
        samples = pd.read_parquet(captured / "samples.parquet")
        rows = [np.asarray(r) for r in samples["input_ids"]]
        blank_id = {"pad": encoder.pad_id, "unk": encoder.unk_id, "mask": encoder.mask_id}[opts.blank_token]
        scores: dict[str, list[np.ndarray | None]] = {m: [None] * len(rows) for m in opts.methods}
        for idx in tqdm(
            length_batches([len(r) for r in rows], opts.batch_size), desc="attribute", leave=False
        ):
            ids, mask = pad_batch([rows[i] for i in idx], encoder.pad_id)
            labels = torch.as_tensor(samples["label"].to_numpy()[idx], dtype=torch.long)
            batch = {}
            if "blank_out" in opts.methods:
                batch["blank_out"] = blank_out(
                    model,
                    ids,
                    mask,
                    blank_id=blank_id,
                    pad_id=encoder.pad_id,
                    mask_blank=opts.mask_blank and opts.blank_token == "pad",
                    target=opts.blank_target,
                    labels=labels,
                    score=opts.blank_score,
                    batch_size=opts.batch_size,
                )
            if "input_gradients" in opts.methods:
                batch["input_gradients"] = input_gradients(
                    model,
                    ids,
                    mask,
                    target=opts.gradient_target[task],
                    target_class=_class(opts.gradient_class[task]),
                    labels=labels,
                    reduction=opts.gradient_reduction,
                    batch_size=opts.batch_size,
                )
            for method, values in batch.items():
                for row, i in enumerate(idx):
                    scores[method][i] = values[row, : len(rows[i])].detach().double().cpu().numpy()
        save_ragged(out / "importance.safetensors", scores)  # type: ignore[arg-type]
        mlrun.log_metrics({m: {"mean": float(np.mean([s.mean() for s in v]))} for m, v in scores.items()})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.attribute {agreement|sst2}")
