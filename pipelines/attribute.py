"""Stage ``attribute@TASK``: blank-out and input-gradient importance of every token."""

from __future__ import annotations

import numpy as np
from omegaconf import DictConfig

from attnflow.attribution.samples import (
    attribute_samples,
    blank_out_under_switches,
    gradient_settings,
    method_settings,
    study_options,
)
from attnflow.data.subsets import seeded_subset
from attnflow.devices import resolve_device
from attnflow.io import read_parquet, save_ragged
from attnflow.models import load_classifier
from pipelines import _config, _stage


def run(cfg: DictConfig, task: str) -> None:
    paths, attribution = _stage.paths(cfg), _config.to_dict(cfg.attribution)
    with _stage.stage_run(cfg, "attribute", task, inputs=[paths.samples(task), paths.model(task)]) as mlrun:
        device = resolve_device(cfg.trainer.device)
        model, encoder = load_classifier(paths.model(task), device=device)
        samples = read_parquet(paths.samples(task))
        common = dict(
            pad_id=encoder.pad_id, batch_size=attribution["batch_size"], device=device, progress=True
        )
        ids, labels = samples["input_ids"].tolist(), samples["label"].to_numpy()
        options = study_options(attribution, cfg.task[task], encoder)
        scores = attribute_samples(model, ids, labels, options=options, **common)
        save_ragged(paths.importance(task), scores, ids=samples["sample_id"].to_numpy())
        # each blank-out switch flipped alone, on a seeded subset: the sensitivity table
        if "blank_out" in options:
            chosen = seeded_subset(
                len(ids), attribution["switch_samples"], cfg.seed, what="attribution.switch_samples"
            )
            switched = blank_out_under_switches(
                model, ids, labels, settings=method_settings(attribution), configured=scores["blank_out"],
                samples=chosen, encoder=encoder, gradient=gradient_settings(cfg.task[task]), **common,
            )  # fmt: skip
            save_ragged(
                paths.switched_importance(task), switched, ids=samples["sample_id"].to_numpy()[chosen]
            )
        mlrun.log_metrics({m: {"mean": float(np.mean([s.mean() for s in v]))} for m, v in scores.items()})


if __name__ == "__main__":
    _stage.main(run, usage="python -m pipelines.attribute TASK")
